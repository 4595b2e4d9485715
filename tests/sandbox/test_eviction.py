"""At the connection limit the server evicts the connection idle longest, not one whose request has come."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import replace
from typing import Any

from envgym.sandbox.httpd import HttpServer, _Connection
from envgym.sandbox.limits import ENV_SERVER_LIMITS


class _Transport:
    def __init__(self) -> None:
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class _Writer:
    def __init__(self) -> None:
        self.transport = _Transport()


def _connection(reader: asyncio.StreamReader, waiting_since: float) -> _Connection:
    writer: Any = _Writer()
    return _Connection(reader, writer, waiting_since)


def test_a_waiting_connection_whose_request_has_arrived_is_not_evicted() -> None:
    async def main() -> tuple[bool, bool, bool]:
        with socket.socket() as sock:
            app: Any = None  # admitting connections never reaches the application
            server = HttpServer(sock, app, limits=replace(ENV_SERVER_LIMITS, max_connections=2))
            try:
                now = time.monotonic()
                arrived = asyncio.StreamReader()
                # The head of its next request is in its buffer; its task has not run to read it yet.
                arrived.feed_data(b"POST /v1/env/sessions/x/step HTTP/1.1\r\n")
                oldest = _connection(arrived, now - 20)
                idle = _connection(asyncio.StreamReader(), now - 10)
                assert server._admit_connection(oldest) and server._admit_connection(idle)
                newcomer = _connection(asyncio.StreamReader(), now)
                admitted = server._admit_connection(newcomer)
                transports: list[Any] = [c.writer.transport for c in (oldest, idle)]
                return admitted, transports[0].aborted, transports[1].aborted
            finally:
                server.server_close()

    admitted, oldest_closed, idle_closed = asyncio.run(main())
    assert admitted and not oldest_closed and idle_closed
