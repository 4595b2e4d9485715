"""HTTP/1.1 framing for envgym servers: strict request heads, bounded bodies, response heads, typed error bodies.

Strict on purpose: lenient parsers that disagree with a proxy about where a request ends are how requests are
smuggled. Only the standard library is used (the sandbox image has no HTTP stack).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol
from urllib.parse import parse_qs

from envgym.sandbox.errors import (
    HeadersTooLargeError,
    InvalidRequestError,
    PayloadTooLargeError,
    SandboxError,
)
from envgym.sandbox.limits import ServerLimits
from envgym.sandbox.wire import ErrorBody

SERVER_NAME = "envgym-sandbox/1"
# Headers that may appear once only: two differing copies are how request smuggling starts.
_SINGLE = frozenset({"content-length", "transfer-encoding", "authorization", "host", "x-request-id"})


@dataclass
class Response:
    status: int
    body: bytes
    content_type: str = "application/json"


def error_response(exc: SandboxError) -> Response:
    body = {"error": ErrorBody(type=exc.type_name, message=str(exc)).model_dump()}
    return Response(exc.status, json.dumps(body).encode())


@dataclass(frozen=True)
class RequestHead:
    """A parsed request line and headers (names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    keep_alive: bool


class Call(Protocol):
    """An admitted request: what to run once its body has arrived."""

    @property
    def inline(self) -> bool:
        """Cheap and non-blocking: answered on the event loop, so health checks stay fast under load."""
        ...

    def run(self, body: bytes) -> Response | Iterator[bytes]: ...


class Application(Protocol):
    def admit(self, head: RequestHead) -> Call:
        """Authorize and route `head`, raising a SandboxError to refuse it before its body is read."""
        ...


def parse_head(data: bytes, limits: ServerLimits) -> RequestHead:
    """Parse a request head ending in CRLF CRLF; strict, because lenient parsers disagree with proxies."""
    lines = data.decode("latin-1").split("\r\n")
    while lines and lines[0] == "":  # RFC 9112: ignore empty lines before the request line
        lines.pop(0)
    parts = lines[0].split(" ") if lines else []
    if len(parts) != 3 or not parts[0].isalpha() or not parts[0].isupper():
        raise InvalidRequestError(f"malformed request line {lines[0][:80] if lines else ''!r}")
    method, target, version = parts
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise InvalidRequestError(f"request line: unsupported version {version[:20]!r} (HTTP/1.1 or 1.0)")
    fields = [line for line in lines[1:] if line]
    if len(fields) > limits.max_headers:
        raise HeadersTooLargeError(f"{len(fields)} header lines; at most {limits.max_headers} are accepted")
    headers: dict[str, str] = {}
    for line in fields:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or " " in name or "\t" in name or "\n" in line:
            raise InvalidRequestError(f"malformed header line {line[:80]!r}")
        key, value = name.lower(), value.strip(" \t")
        if key in headers:
            if key in _SINGLE:
                raise InvalidRequestError(f"{name}: the header is repeated")
            value = f"{headers[key]}, {value}"
        headers[key] = value
    path, query_text = _origin_form(target)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    query = {k: v[-1] for k, v in parse_qs(query_text).items()} if query_text else {}
    return RequestHead(method, path, query, headers, keep_alive)


def _origin_form(target: str) -> tuple[str, str]:
    """(path, query) of an origin-form request target (RFC 9112 3.2.1), refusing anything else.

    Not `urlsplit`: it reads `//evil/v1/health` as a host and the path `/v1/health`, and silently drops tab, CR and
    LF, so `/v1/he\talth` was routed as `/v1/health`. A proxy in front would have routed them otherwise."""
    if not target.startswith("/") or target.startswith("//"):
        raise InvalidRequestError(f"request target {target[:80]!r}: expected an absolute path such as /v1/health")
    if any(c <= " " or c == "\x7f" or c == "#" for c in target):
        raise InvalidRequestError(f"request target {target[:80]!r}: whitespace, control characters and '#' are "
                                  "not allowed (percent-encode them)")
    path, _, query = target.partition("?")
    return path, query


def body_length(head: RequestHead, limits: ServerLimits) -> int:
    """The declared body size, refusing what cannot be bounded before reading: chunked, negative, oversized."""
    if "transfer-encoding" in head.headers:
        raise InvalidRequestError("Transfer-Encoding: request bodies must be sent with a Content-Length")
    declared = head.headers.get("content-length")
    if declared is None:
        return 0  # HTTP/1.1: a request without Content-Length or Transfer-Encoding has no body
    if not (declared.isascii() and declared.isdigit()):
        raise InvalidRequestError(f"Content-Length: {declared[:40]!r} is not a non-negative integer")
    length = int(declared)
    if length > limits.max_body_bytes:
        raise PayloadTooLargeError(
            f"Content-Length: {length} bytes exceeds the {limits.max_body_bytes} byte limit"
        )
    return length


def response_head(status: int, content_type: str, length: int | None, keep_alive: bool) -> bytes:
    start, end = _head_parts(status, content_type, keep_alive)
    framing = b"Content-Length: %d" % length if length is not None else b"Transfer-Encoding: chunked"
    return start + framing + end


@functools.cache
def _head_parts(status: int, content_type: str, keep_alive: bool) -> tuple[bytes, bytes]:
    """A response head around its framing line, made once per kind of response (a head per step adds up)."""
    start = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nServer: {SERVER_NAME}\r\nContent-Type: {content_type}\r\n"
    end = "\r\n" if keep_alive else "\r\nConnection: close\r\n"
    return start.encode("latin-1"), (end + "\r\n").encode("latin-1")
