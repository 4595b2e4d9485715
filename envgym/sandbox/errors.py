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


class RequestTimeoutError(SandboxError):
    """The client took too long to send a request head or body; the connection is closed."""

    status = 408
    type_name = "RequestTimeout"


class ConflictError(SandboxError):
    """An `X-Request-ID` already used for a different request (another route, session or body)."""

    status = 409
    type_name = "Conflict"


class PayloadTooLargeError(SandboxError):
    """The request body is larger than the server accepts; nothing of it was read."""

    status = 413
    type_name = "PayloadTooLarge"


class BudgetExceededError(SandboxError):
    """A budget of `envgym.sandbox.limits` was hit (steps, messages or action bytes of an episode, an answer's size,
    the server's buffered bodies); the message names the budget and what to do."""

    status = 429
    type_name = "BudgetExceeded"


class HeadersTooLargeError(SandboxError):
    """The request line and headers are longer, or more numerous, than the server accepts."""

    status = 431
    type_name = "HeadersTooLarge"


class EnvHostError(SandboxError):
    """The hosted environment raised while being made, reset or stepped."""

    status = 422
    type_name = "EnvError"


class SandboxUnavailableError(SandboxError):
    """The sandbox cannot be reached (it exited, was reaped, or its server died)."""

    status = 503
    type_name = "Unavailable"


class SandboxOutOfMemoryError(SandboxUnavailableError):
    """The sandbox ran out of memory and its server was killed (the engine reported an OOM kill)."""

    type_name = "OutOfMemory"


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
        RequestTimeoutError,
        ConflictError,
        PayloadTooLargeError,
        BudgetExceededError,
        HeadersTooLargeError,
        EnvHostError,
        SandboxUnavailableError,
        SandboxOutOfMemoryError,
        SandboxClosedError,
    )
}
