"""The asyncio twin of `KeepAliveClient`: one keep-alive connection to an env server, used from an event loop.

`RemoteEnv.areset` / `astep` go through it, so one loop can step many sessions (`envgym.play.aio.astep_many`) at
the client CPU cost of the lean synchronous client rather than an httpx client's (several times more per request).
It sends the same bytes as the `KeepAliveClient` it is made from (host, token, request ids from the same counter),
resends a request whose connection dropped once with the same request id (the server's replay cache answers it
without running it twice) and raises the same typed errors. A call cancelled or timed out mid-exchange closes the
connection: its answer may still arrive, and must not be read as the next call's.
"""

from __future__ import annotations

import asyncio

from envgym.sandbox.errors import SandboxUnavailableError
from envgym.sandbox.keepalive import (
    MAX_HEAD_BYTES,
    RETRY_DELAY_S,
    Dropped,
    KeepAliveClient,
    parse_response_head,
    typed_error,
)


class _Connection(asyncio.Protocol):
    """One keep-alive connection read by callbacks: each response completes the waiting call's future as soon as its
    last byte arrives (a stream reader costs a coroutine, a future and a wake-up per read, two reads a response)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buffer = bytearray()
        self._head: tuple[int, int, bool, int] | None = None  # status, length, keep-alive, where the body starts
        self._waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def exchange(self, data: bytes) -> asyncio.Future[tuple[int, bytes, bool]]:
        """Send one request; the future gets (status, body, keep-alive), or Dropped if the connection ends first."""
        assert self.transport is not None and self._waiter is None
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self.transport.write(data)
        return waiter

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # nobody asked: the connection is dropped before it is used again
        if self._head is None:
            end = self._buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buffer) > MAX_HEAD_BYTES:
                    self._fail(Dropped(f"response head over {MAX_HEAD_BYTES} bytes"))
                return
            try:
                status, length, keep_alive = parse_response_head(bytes(self._buffer[:end]))
            except Dropped as exc:
                self._fail(exc)
                return
            self._head = status, length, keep_alive, end + 4
        status, length, keep_alive, start = self._head
        if len(self._buffer) < start + length:
            return
        content = bytes(self._buffer[start : start + length])
        del self._buffer[: start + length]
        self._head, self._waiter = None, None
        waiter.set_result((status, content, keep_alive))

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._fail(Dropped("the connection closed before the whole response arrived"))


class AsyncKeepAliveClient:
    """Requests to the server of `spec` over one persistent asyncio connection; calls take turns on it.

    Bound to the event loop that first uses it (its connection belongs to that loop).
    """

    def __init__(self, spec: KeepAliveClient) -> None:
        self.spec = spec
        self.url = spec.url
        self._lock = asyncio.Lock()
        self._connection: _Connection | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        """The response body of one request; error statuses raise their typed errors."""
        spec = self.spec
        data = spec.request_bytes(method, path, body)
        what = f"{method} {spec.url}{path}"
        async with self._lock:
            try:
                async with asyncio.timeout(spec.timeout_s):
                    status, content, keep_alive = await self._exchange_retrying(data, what)
            except TimeoutError:
                raise SandboxUnavailableError(f"{what}: no answer within {spec.timeout_s:g}s") from None
            if not keep_alive:
                self._drop()
        if status >= 400:
            raise typed_error(status, content, what)
        return content

    async def _exchange_retrying(self, data: bytes, what: str) -> tuple[int, bytes, bool]:
        for attempt in range(self.spec.retries + 1):
            try:
                return await self._exchange(data)
            except (OSError, Dropped) as exc:  # refused, reset, closed mid-answer
                self._drop()
                if attempt == self.spec.retries:
                    raise SandboxUnavailableError(f"{what}: {str(exc) or type(exc).__name__}") from exc
            except BaseException:  # cancelled or timed out mid-exchange: the connection's state is unknown
                self._drop()
                raise
            await asyncio.sleep(RETRY_DELAY_S)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _exchange(self, data: bytes) -> tuple[int, bytes, bool]:
        connection = self._connection
        if connection is None or connection.closed:
            loop = asyncio.get_running_loop()
            _, connection = await loop.create_connection(_Connection, self.spec.host, self.spec.port)
            self._connection = connection
        return await connection.exchange(data)

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None:
            connection.transport.abort()

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None and connection.transport is not None and not connection.closed:
            connection.transport.close()
            await asyncio.sleep(0)  # let the loop run the close
