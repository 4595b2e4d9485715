"""The asyncio keep-alive client against hand-written servers: resends, typed errors, time bounds, cancellation,
answers that arrive in pieces, and a head that never ends."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import pytest

from envgym.sandbox.akeepalive import AsyncKeepAliveClient
from envgym.sandbox.errors import NotFoundError, SandboxUnavailableError
from envgym.sandbox.keepalive import KeepAliveClient

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def _client(port: int, timeout_s: float = 30, token: str | None = "t") -> AsyncKeepAliveClient:
    return AsyncKeepAliveClient(KeepAliveClient(f"http://127.0.0.1:{port}", token=token, timeout_s=timeout_s))


def _ids(heads: list[bytes]) -> list[bytes]:
    return [line for head in heads for line in head.split(b"\r\n") if line.startswith(b"X-Request-ID")]


def test_a_dropped_request_is_sent_again_with_the_same_request_id() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    heads: list[bytes] = []

    def serve() -> None:
        first, _ = listener.accept()
        heads.append(first.recv(65536))
        first.close()  # dropped before answering
        second, _ = listener.accept()
        heads.append(second.recv(65536))
        second.sendall(OK)
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = _client(listener.getsockname()[1])
    assert asyncio.run(client.request("POST", "/v1/env/sessions/x/step", b'{"action": 1}')) == b"{}"
    thread.join(30)
    ids = _ids(heads)
    assert len(ids) == 2 and ids[0] == ids[1]
    assert all(b"Authorization: Bearer t" in head and head.endswith(b'{"action": 1}') for head in heads)
    listener.close()


def test_calls_share_one_connection_and_send_what_the_sync_client_sends() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []
    connections = 0

    def serve() -> None:
        nonlocal connections
        conn, _ = listener.accept()
        connections += 1
        buffer = b""
        for _ in range(3):
            while b"\r\n\r\n" not in buffer or not buffer.endswith(b"}"):
                buffer += conn.recv(65536)
            received.append(buffer)
            buffer = b""
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"n\":1}")
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    sync = KeepAliveClient(f"http://127.0.0.1:{listener.getsockname()[1]}", token="t", timeout_s=30)
    client = AsyncKeepAliveClient(sync)

    async def main() -> list[bytes]:  # three calls at once take turns on the one connection
        return list(await asyncio.gather(*(client.request("POST", f"/v1/p{i}", b"{}") for i in range(3))))

    assert asyncio.run(main()) == [b'{"n":1}'] * 3
    assert connections == 1
    expected = sync.request_bytes("POST", "/v1/p0", b"{}")  # the sync client's bytes, apart from the request id
    without_id = [b"\r\n".join(x for x in r.split(b"\r\n") if not x.startswith(b"X-Request-ID")) for r in received]
    assert without_id[0] == b"\r\n".join(x for x in expected.split(b"\r\n") if not x.startswith(b"X-Request-ID"))
    assert len(set(_ids(received))) == 3  # a fresh id per call
    listener.close()


def test_errors_are_typed_and_bounded_in_time() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        body = json.dumps({"error": {"type": "NotFound", "message": "no env session 'x'"}}).encode()
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        conn2, _ = listener.accept()  # then a server that never answers
        accepted.append(conn2)

    threading.Thread(target=serve, daemon=True).start()
    client = _client(listener.getsockname()[1], timeout_s=2, token=None)

    async def main() -> float:
        with pytest.raises(NotFoundError, match="no env session"):
            await client.request("POST", "/v1/env/sessions/x/step", b"{}")
        client._drop()
        started = time.monotonic()
        with pytest.raises(SandboxUnavailableError, match="no answer within 2s"):
            await client.request("POST", "/v1/env/sessions/x/step", b"{}")
        return time.monotonic() - started

    assert asyncio.run(main()) < 10
    listener.close()


def test_a_refused_connection_is_a_typed_error() -> None:
    port = socket.create_server(("127.0.0.1", 0))
    free = port.getsockname()[1]
    port.close()
    with pytest.raises(SandboxUnavailableError, match=f"POST http://127.0.0.1:{free}/v1/x"):
        asyncio.run(_client(free, timeout_s=5).request("POST", "/v1/x", b"{}"))


def test_a_call_cancelled_mid_answer_never_hands_its_answer_to_the_next_call() -> None:
    """The first call is cancelled after the server read it; its late answer must not become the second call's."""
    listener = socket.create_server(("127.0.0.1", 0))
    first_read = threading.Event()
    connections: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        connections.append(conn)
        conn.recv(65536)
        first_read.set()
        time.sleep(0.3)
        with contextlib.suppress(OSError):  # the client may have reset the connection already
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n\"stale!!\"")  # the cancelled call's answer
        second, _ = listener.accept()  # the next call comes on a new connection
        connections.append(second)
        second.recv(65536)
        second.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n\"fresh\"")

    threading.Thread(target=serve, daemon=True).start()
    client = _client(listener.getsockname()[1])

    async def main() -> bytes:
        first = asyncio.create_task(client.request("POST", "/v1/a", b"{}"))
        while not first_read.is_set():
            await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        await asyncio.sleep(0.5)  # the stale answer has arrived by now
        return await client.request("POST", "/v1/b", b"{}")

    assert asyncio.run(main()) == b'"fresh"'
    assert len(connections) == 2
    listener.close()


def test_an_answer_that_arrives_in_pieces_is_put_together() -> None:
    """Head and body split across many small writes (a slow link, a proxy): each call still gets its whole body."""
    listener = socket.create_server(("127.0.0.1", 0))
    bodies = [json.dumps({"n": n, "pad": "x" * 3000}).encode() for n in range(2)]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for body in bodies:
            conn.recv(65536)
            answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
                len(body), body)
            for cut in (5, 17, 40, 41, 60, 900, len(answer)):  # inside the status line, the head's end, the body
                conn.sendall(answer[:cut])
                answer = answer[cut:]
                time.sleep(0.01)
                if not answer:
                    break
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    client = _client(listener.getsockname()[1])

    async def main() -> list[bytes]:
        return [await client.request("POST", "/v1/a", b"{}") for _ in bodies]

    assert asyncio.run(main()) == bodies
    listener.close()


def test_a_head_without_end_is_refused_once_over_the_limit() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        for _ in range(2):  # the first attempt and its one resend
            conn, _ = listener.accept()
            conn.recv(65536)
            with contextlib.suppress(OSError):
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Junk: " + b"y" * (80 << 10))
            time.sleep(0.5)
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    with pytest.raises(SandboxUnavailableError, match="response head over 65536 bytes"):
        asyncio.run(_client(listener.getsockname()[1], timeout_s=20).request("POST", "/v1/a", b"{}"))
    listener.close()
