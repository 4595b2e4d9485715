"""Typed sandbox errors. The server sends `{"error": {"type", "message"}}`; the client re-raises by type."""

from __future__ import annotations


class SandboxError(Exception):
    """Base class. `status` is the HTTP status the server answers with for this error."""

    status = 500
    type_name = "SandboxError"


class InvalidRequestError(SandboxError):
    """The request body or a parameter is malformed (the message names the field)."""

    status = 400
    type_name = "InvalidRequest"


class AuthError(SandboxError):
    """Missing or wrong bearer token."""

    status = 401
    type_name = "Unauthorized"


class NotFoundError(SandboxError):
    """A file, session or route that does not exist."""

    status = 404
    type_name = "NotFound"


class EnvHostError(SandboxError):
    """The hosted environment raised while being made, reset or stepped."""

    status = 422
    type_name = "EnvError"


class SandboxUnavailableError(SandboxError):
    """The sandbox cannot be reached (it exited, was reaped, or its server died)."""

    status = 503
    type_name = "Unavailable"


class SandboxClosedError(SandboxError):
    """The sandbox was closed by this client; it cannot be used any more."""

    type_name = "Closed"


ERROR_TYPES: dict[str, type[SandboxError]] = {
    cls.type_name: cls
    for cls in (
        SandboxError,
        InvalidRequestError,
        AuthError,
        NotFoundError,
        EnvHostError,
        SandboxUnavailableError,
        SandboxClosedError,
    )
}
