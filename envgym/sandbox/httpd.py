"""The HTTP/1.1 front of every envgym server: framing and limits on asyncio, handlers on a bounded thread pool.

One event loop holds every connection, so an idle or slow client costs a socket and a few kilobytes, not a thread.
The order of a request is fixed: read the head (bounded in size and time), let the application admit it (bearer
auth and routing, before a single body byte is read), check Content-Length against the cap, read the body
(bounded in time), run the handler on a pool thread, write the response. Anything rejected before the body is read
gets its error, a half-close and a short bounded drain, then the connection closes: a refused body is never parsed
as the next request. Only the standard library is used, so the same front runs in the minimal sandbox image.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol
from urllib.parse import parse_qs, urlsplit

from envgym.sandbox.errors import (
    HeadersTooLargeError,
    InvalidRequestError,
    PayloadTooLargeError,
    RequestTimeoutError,
    SandboxError,
    SandboxUnavailableError,
)
from envgym.sandbox.limits import ServerLimits
from envgym.sandbox.threads import DaemonThreadPool
from envgym.sandbox.wire import ErrorBody

SERVER_NAME = "envgym-sandbox/1"
_SHUTDOWN_GRACE_S = 1.0
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
    split = urlsplit(target)
    connection = headers.get("connection", "").lower()
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    query = {k: v[-1] for k, v in parse_qs(split.query).items()}
    return RequestHead(method, split.path, query, headers, keep_alive)


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


def _response_head(status: int, content_type: str, length: int | None, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}",
        f"Server: {SERVER_NAME}",
        f"Content-Type: {content_type}",
        f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked",
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    """The next chunk of a streamed response (None at the end); an error mid-stream becomes a last NDJSON line."""
    try:
        return next(chunks)
    except StopIteration:
        return None
    except SandboxError as exc:
        line = {"type": "error", "error": {"type": exc.type_name, "message": str(exc)}}
        return json.dumps(line).encode() + b"\n"


@dataclass(eq=False)
class _Connection:
    writer: asyncio.StreamWriter
    waiting_since: float  # when it began waiting for a request head
    waiting: bool = True  # evictable: no request of it is being read or run


class HttpServer:
    """Serves `app` on a bound, listening socket. `serve_forever`, `shutdown` and `server_close` mirror socketserver.

    `shutdown` may be called from any thread; it returns once the loop has stopped and every connection is closed.
    """

    def __init__(self, sock: socket.socket, app: Application, limits: ServerLimits) -> None:
        self.socket = sock
        self.server_address = sock.getsockname()
        self.limits = limits
        self.max_connections = limits.connection_budget()
        self._app = app
        self._unix = sock.family == socket.AF_UNIX
        self._pool = DaemonThreadPool(limits.handler_threads, name="envgym-handler")
        self._connections: dict[int, _Connection] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()

    # -- lifecycle ------------------------------------------------------------------------------------------

    def serve_forever(self, poll_interval: float = 0.5) -> None:
        """Run the event loop until `shutdown` (poll_interval is accepted for socketserver compatibility)."""
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        with self._lock:
            self._stop_requested = True
            loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stop.set)
            self._stopped.wait(10)

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown()

    async def _serve(self) -> None:
        limit = self.limits.max_header_bytes
        if self._unix:
            server = await asyncio.start_unix_server(self._on_connection, sock=self.socket, limit=limit)
        else:
            server = await asyncio.start_server(self._on_connection, sock=self.socket, limit=limit)
        with self._lock:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            if self._stop_requested:
                self._stop.set()
        await self._stop.wait()
        server.close()
        # Requests in flight (the /v1/shutdown that stopped us, a step) get a moment to send their answers.
        deadline = time.monotonic() + _SHUTDOWN_GRACE_S
        while any(not c.waiting for c in self._connections.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self._connections.values()):
            conn.writer.transport.abort()
        self._connections.clear()

    # -- connections ----------------------------------------------------------------------------------------

    def _admit_connection(self, conn: _Connection) -> bool:
        """Room for `conn`: a free slot, else the slot of the connection that has waited longest for a request."""
        if len(self._connections) >= self.max_connections:
            idle = [c for c in self._connections.values() if c.waiting]
            if not idle:
                return False
            victim = min(idle, key=lambda c: c.waiting_since)
            self._connections.pop(id(victim), None)
            victim.writer.transport.abort()
        self._connections[id(conn)] = conn
        return True

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer, time.monotonic())
        if not self._admit_connection(conn):
            busy = SandboxUnavailableError(
                f"the server has {self.max_connections} connections open and all are busy; retry later"
            )
            response = error_response(busy)
            writer.write(_response_head(503, response.content_type, len(response.body), False) + response.body)
            writer.close()
            return
        try:
            await self._serve_connection(conn, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass  # the client went away or stalled; nothing is left to answer
        finally:
            self._connections.pop(id(conn), None)
            await self._close(writer)

    async def _close(self, writer: asyncio.StreamWriter) -> None:
        """Close after flushing what is buffered (a response may still be on its way), within the write timeout."""
        writer.close()
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            async with asyncio.timeout(self.limits.body_timeout_s):
                await writer.wait_closed()
        writer.transport.abort()

    async def _serve_connection(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        limits = self.limits
        first = True
        while True:
            conn.waiting, conn.waiting_since = True, time.monotonic()
            data = await self._read_head(reader, writer, first)
            if data is None:
                return
            first = False
            conn.waiting = False
            try:
                head = parse_head(data, limits)
                call = self._app.admit(head)
                length = body_length(head, limits)
                if length and head.headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await self._read_body(reader, length)
            except SandboxError as exc:
                await self._reject(reader, writer, error_response(exc))
                return
            if call.inline:
                result = call.run(body)
            else:
                result = await asyncio.get_running_loop().run_in_executor(self._pool, call.run, body)
            if isinstance(result, Response):
                keep_alive = head.keep_alive and result.status < 400
                head_bytes = _response_head(result.status, result.content_type, len(result.body), keep_alive)
                writer.write(head_bytes + result.body)
                async with asyncio.timeout(limits.body_timeout_s):
                    await writer.drain()
            else:
                keep_alive = head.keep_alive
                await self._write_stream(writer, result, keep_alive)
            if not keep_alive:
                return

    async def _read_head(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bool
    ) -> bytes | None:
        """The next request head, or None when the client closed or idled out between requests."""
        idle = self.limits.header_timeout_s if first else self.limits.keepalive_idle_s
        try:
            async with asyncio.timeout(idle):
                start = await reader.read(1)
        except TimeoutError:
            return None
        if not start:
            return None
        try:
            async with asyncio.timeout(self.limits.header_timeout_s):
                return start + await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            error: SandboxError = RequestTimeoutError(
                f"request head not complete within {self.limits.header_timeout_s:g}s"
            )
        except asyncio.LimitOverrunError:
            error = HeadersTooLargeError(
                f"request head exceeds the {self.limits.max_header_bytes} byte limit"
            )
        await self._reject(reader, writer, error_response(error))
        return None

    async def _read_body(self, reader: asyncio.StreamReader, length: int) -> bytes:
        chunks: list[bytes] = []
        left = length
        while left:
            try:
                async with asyncio.timeout(self.limits.body_timeout_s):
                    chunk = await reader.read(min(left, 1 << 20))
            except TimeoutError:
                raise RequestTimeoutError(
                    f"request body: no data for {self.limits.body_timeout_s:g}s "
                    f"with {left} of {length} bytes still to come"
                ) from None
            if not chunk:
                raise asyncio.IncompleteReadError(b"".join(chunks), length)
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    async def _write_stream(self, writer: asyncio.StreamWriter, chunks: Iterator[bytes], keep_alive: bool) -> None:
        loop = asyncio.get_running_loop()
        writer.write(_response_head(200, "application/x-ndjson", None, keep_alive))
        try:
            while (chunk := await loop.run_in_executor(self._pool, _next_chunk, chunks)) is not None:
                writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                async with asyncio.timeout(self.limits.body_timeout_s):
                    await writer.drain()
            writer.write(b"0\r\n\r\n")
            async with asyncio.timeout(self.limits.body_timeout_s):
                await writer.drain()
        finally:
            # A client that left mid-stream must not leave the command running: closing the generator kills it.
            close: Callable[[], None] | None = getattr(chunks, "close", None)
            if close is not None:
                await loop.run_in_executor(self._pool, close)

    async def _reject(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, response: Response) -> None:
        """Answer with an error and close, discarding (never parsing) a bounded amount of what is still coming."""
        head = _response_head(response.status, response.content_type, len(response.body), False)
        writer.write(head + response.body)
        with contextlib.suppress(ConnectionError, TimeoutError, OSError):
            async with asyncio.timeout(self.limits.linger_s):
                await writer.drain()
                if writer.can_write_eof():
                    writer.write_eof()
                drained = 0
                while drained < self.limits.linger_bytes:
                    chunk = await reader.read(65536)
                    if not chunk:
                        break
                    drained += len(chunk)
