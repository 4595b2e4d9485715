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
import contextlib

from envgym.sandbox.errors import SandboxUnavailableError
from envgym.sandbox.keepalive import (
    MAX_HEAD_BYTES,
    RETRY_DELAY_S,
    Dropped,
    KeepAliveClient,
    parse_response_head,
    typed_error,
)


class AsyncKeepAliveClient:
    """Requests to the server of `spec` over one persistent asyncio connection; calls take turns on it.

    Bound to the event loop that first uses it (its connection belongs to that loop).
    """

    def __init__(self, spec: KeepAliveClient) -> None:
        self.spec = spec
        self.url = spec.url
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

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
            reused = self._writer is not None
            try:
                return await self._exchange(data)
            except (OSError, Dropped, asyncio.IncompleteReadError) as exc:  # refused, reset, closed mid-answer
                self._drop()
                if attempt == self.spec.retries:
                    raise SandboxUnavailableError(f"{what}: {str(exc) or type(exc).__name__}") from exc
            except BaseException:  # cancelled or timed out mid-exchange: the connection's state is unknown
                self._drop()
                raise
            if not reused:  # a kept-alive connection the server had closed: resend at once on a new one
                await asyncio.sleep(RETRY_DELAY_S)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _exchange(self, data: bytes) -> tuple[int, bytes, bool]:
        if self._writer is None or self._reader is None:
            self._reader, self._writer = await asyncio.open_connection(
                self.spec.host, self.spec.port, limit=MAX_HEAD_BYTES
            )
        reader, writer = self._reader, self._writer
        writer.write(data)
        if writer.transport.get_write_buffer_size():  # else all of it went out: nothing to wait for
            await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise Dropped(f"response head over {MAX_HEAD_BYTES} bytes") from None
        status, length, keep_alive = parse_response_head(head[:-4])
        content = await reader.readexactly(length) if length else b""
        return status, content, keep_alive

    def _drop(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.transport.abort()

    def abort(self) -> None:
        """Close the connection at once, without waiting (a pool discarding an idle one); the next call reopens it."""
        self._drop()

    async def aclose(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await writer.wait_closed()
