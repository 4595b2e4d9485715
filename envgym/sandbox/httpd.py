"""The HTTP/1.1 front of every envgym server: framing and limits on asyncio, handlers on a bounded thread pool.

One event loop holds every connection, so an idle or slow client costs a socket and a few kilobytes, not a thread.
The time limits of a connection's waits (idle, head, body, write) are deadlines that one watchdog timer checks a few
times a second, not a timer per wait: four timers per request cost as much CPU as a quick env step.
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
import math
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from envgym.sandbox.errors import (
    BudgetExceededError,
    HeadersTooLargeError,
    RequestTimeoutError,
    SandboxError,
    SandboxUnavailableError,
)
from envgym.sandbox.framing import (
    Application,
    Response,
    body_length,
    error_response,
    parse_head,
    response_head,
)
from envgym.sandbox.limits import ServerLimits
from envgym.sandbox.threads import DaemonThreadPool

_SHUTDOWN_GRACE_S = 1.0
_ACCEPT_BATCH = 32
_ACCEPT_RETRY_S = 0.1
# Sockets beyond max_connections that may be open at once: 503 answers and evicted connections still closing.
# Kept below ServerLimits.fd_reserve, so connections never take the descriptors pipes and files need.
_OVERFLOW = 64
T = TypeVar("T")


def _next_chunk(chunks: Iterator[bytes]) -> bytes | None:
    """The next chunk of a streamed response (None at the end); an error mid-stream becomes a last NDJSON line."""
    try:
        return next(chunks)
    except StopIteration:
        return None
    except SandboxError as exc:
        line = {"type": "error", "error": {"type": exc.type_name, "message": str(exc)}}
        return json.dumps(line).encode() + b"\n"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed (env servers; about half the CPU per request of asyncio's own loop),
    else asyncio's (None): the sandbox image carries the standard library only."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def _has_unread(reader: asyncio.StreamReader) -> bool:
    """Whether bytes have arrived that the connection's task has not read yet. (StreamReader keeps them in a
    private buffer; without it, it says no.)"""
    return bool(getattr(reader, "_buffer", b""))


@dataclass(eq=False)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    waiting_since: float  # when it began waiting for a request head
    task: asyncio.Task[None] | None = None
    waiting: bool = True  # no request of it is being read or run (evictable unless one has just arrived)
    deadline: float = math.inf  # loop time by which the current wait must end (see HttpServer._within)
    expired: bool = False  # the watchdog cancelled the task because the deadline passed


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
        self._pool = DaemonThreadPool(limits.handler_threads, name="envgym-handler")
        self._buffered = 0  # announced body bytes of requests being read or run (max_buffered_body_bytes)
        self._connections: dict[int, _Connection] = {}
        self._open = 0  # accepted sockets not yet closed: registered, refused with 503, or being closed
        self._accepting = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stop_requested = False
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        # Deadlines are checked this often: late by a tenth of the shortest limit at most.
        shortest = min(limits.header_timeout_s, limits.keepalive_idle_s, limits.body_timeout_s)
        self._watch_every_s = min(1.0, max(0.01, shortest / 10))
        self._watchdog: asyncio.TimerHandle | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        """Run the event loop until `shutdown`."""
        try:
            with asyncio.Runner(loop_factory=_loop_factory()) as runner:
                runner.run(self._serve())
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
        loop = asyncio.get_running_loop()
        self.socket.setblocking(False)
        with self._lock:
            self._loop, self._stop = loop, asyncio.Event()
            if self._stop_requested:
                self._stop.set()
        self._resume_accepting()
        self._watchdog = loop.call_later(self._watch_every_s, self._watch)
        await self._stop.wait()
        self._watchdog.cancel()
        self._pause_accepting()
        # Requests in flight (the /v1/shutdown that stopped us, a step) get a moment to send their answers.
        deadline = time.monotonic() + _SHUTDOWN_GRACE_S
        while any(not c.waiting for c in self._connections.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        for conn in list(self._connections.values()):
            conn.writer.transport.abort()
        self._connections.clear()

    # -- time limits ----------------------------------------------------------------------------------------

    def _watch(self) -> None:
        """Cancel the task of every connection whose wait is past its deadline; `_within` turns that into a timeout."""
        assert self._loop is not None
        now = self._loop.time()
        for conn in self._connections.values():
            if conn.deadline < now and conn.task is not None:
                conn.deadline, conn.expired = math.inf, True
                conn.task.cancel()
        self._watchdog = self._loop.call_later(self._watch_every_s, self._watch)

    async def _within(self, conn: _Connection, seconds: float, wait: Awaitable[T]) -> T:
        """`await wait`, raising TimeoutError if it takes longer than `seconds` (give or take a watchdog period)."""
        conn.deadline = asyncio.get_running_loop().time() + seconds
        try:
            return await wait
        except asyncio.CancelledError:
            if not conn.expired or conn.task is None:
                raise
            conn.expired = False
            conn.task.uncancel()
            raise TimeoutError from None
        finally:
            conn.deadline = math.inf

    # -- accepting ------------------------------------------------------------------------------------------
    # Accepting is done here, not by asyncio.start_server: its loop accepts up to 100 sockets per wake-up whatever
    # the limit, and a burst of idle connections then exhausted the descriptors before any eviction could close one.

    def _resume_accepting(self) -> None:
        if not self._accepting and self._loop is not None and not self._stop_requested:
            self._loop.add_reader(self.socket.fileno(), self._accept_ready)
            self._accepting = True

    def _pause_accepting(self) -> None:
        if self._accepting and self._loop is not None:
            self._loop.remove_reader(self.socket.fileno())
            self._accepting = False

    def _accept_ready(self) -> None:
        assert self._loop is not None
        for _ in range(_ACCEPT_BATCH):
            if self._open >= self.max_connections + _OVERFLOW:
                self._pause_accepting()  # resumed when a socket closes
                return
            try:
                sock, _ = self.socket.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # EMFILE, ENOBUFS: out of a resource we do not count; try again shortly
                self._pause_accepting()
                self._loop.call_later(_ACCEPT_RETRY_S, self._resume_accepting)
                return
            self._open += 1
            self._loop.create_task(self._start_connection(sock))

    async def _start_connection(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader(limit=self.limits.max_header_bytes, loop=loop)
            protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
            transport, _ = await loop.connect_accepted_socket(lambda: protocol, sock)
            writer = asyncio.StreamWriter(transport, protocol, reader, loop)
            await self._on_connection(reader, writer)
        except OSError:
            sock.close()
        finally:
            self._open -= 1
            if self._open < self.max_connections + _OVERFLOW:
                self._resume_accepting()

    # -- connections ----------------------------------------------------------------------------------------

    def _admit_connection(self, conn: _Connection) -> bool:
        """Room for `conn`: a free slot, else the slot of the connection that has waited longest for a request.

        A waiting connection whose next request has already arrived (bytes read but not yet taken up by its task)
        is not idle: closing it would lose a request the client has sent.
        """
        if len(self._connections) >= self.max_connections:
            idle = [c for c in self._connections.values() if c.waiting and not _has_unread(c.reader)]
            if not idle:
                return False
            victim = min(idle, key=lambda c: c.waiting_since)
            self._connections.pop(id(victim), None)
            victim.writer.transport.abort()
        self._connections[id(conn)] = conn
        return True

    async def _on_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(reader, writer, time.monotonic(), asyncio.current_task())
        if not self._admit_connection(conn):
            busy = SandboxUnavailableError(
                f"the server has {self.max_connections} connections open and all are busy; retry later"
            )
            response = error_response(busy)
            writer.write(response_head(503, response.content_type, len(response.body), False) + response.body)
            await self._close(writer)
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
            data = await self._read_head(conn, reader, writer, first)
            if data is None:
                return
            first = False
            conn.waiting = False
            reserved = 0
            try:
                head = parse_head(data, limits)
                call = self._app.admit(head)
                length = body_length(head, limits)
                reserved = self._reserve_body(length)
                if length and head.headers.get("expect", "").lower() == "100-continue":
                    writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
                body = await self._read_body(conn, reader, length)
            except SandboxError as exc:
                self._buffered -= reserved
                await self._reject(reader, writer, error_response(exc))
                return
            except BaseException:
                self._buffered -= reserved
                raise
            try:
                if call.inline and len(body) <= limits.inline_body_bytes:
                    result = call.run(body)
                else:
                    result = await asyncio.get_running_loop().run_in_executor(self._pool, call.run, body)
            finally:
                self._buffered -= reserved
            if isinstance(result, Response):
                keep_alive = head.keep_alive and result.status < 400
                head_bytes = response_head(result.status, result.content_type, len(result.body), keep_alive)
                writer.write(head_bytes + result.body)
                if writer.transport.get_write_buffer_size():  # else all of it went out: nothing to wait for
                    await self._within(conn, limits.body_timeout_s, writer.drain())
            else:
                keep_alive = head.keep_alive
                await self._write_stream(writer, result, keep_alive)
            if not keep_alive:
                return

    async def _read_head(
        self, conn: _Connection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, first: bool
    ) -> bytes | None:
        """The next request head, or None when the client closed or idled out between requests."""
        idle = self.limits.header_timeout_s if first else self.limits.keepalive_idle_s
        try:
            start = await self._within(conn, idle, reader.read(1))
        except TimeoutError:
            return None
        if not start:
            return None
        try:
            return start + await self._within(conn, self.limits.header_timeout_s, reader.readuntil(b"\r\n\r\n"))
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

    def _reserve_body(self, length: int) -> int:
        """Count `length` against `max_buffered_body_bytes` (all connections' bodies together), or refuse it."""
        if length and self._buffered + length > self.limits.max_buffered_body_bytes:
            raise BudgetExceededError(
                f"server budget: {self._buffered} bytes of request bodies are held already and this one's {length} "
                f"would pass max_buffered_body_bytes ({self.limits.max_buffered_body_bytes}); retry later"
            )
        self._buffered += length
        return length

    async def _read_body(self, conn: _Connection, reader: asyncio.StreamReader, length: int) -> bytes:
        """The body, each pause within `body_timeout_s` and the whole within `body_deadline_s` (no slow dribble)."""
        chunks: list[bytes] = []
        left = length
        loop = asyncio.get_running_loop()
        end = loop.time() + self.limits.body_deadline_s
        while left:
            remaining = end - loop.time()
            try:
                if remaining <= 0:
                    raise TimeoutError
                wait = min(self.limits.body_timeout_s, remaining)
                chunk = await self._within(conn, wait, reader.read(min(left, 1 << 20)))
            except TimeoutError:
                if end - loop.time() <= self.limits.body_timeout_s / 10:
                    raise RequestTimeoutError(
                        f"request body: not complete within body_deadline_s ({self.limits.body_deadline_s:g}s) "
                        f"with {left} of {length} bytes still to come"
                    ) from None
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
        writer.write(response_head(200, "application/x-ndjson", None, keep_alive))
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
        head = response_head(response.status, response.content_type, len(response.body), False)
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
