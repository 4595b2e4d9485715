"""The HTTP front's limits, over raw sockets: auth before body, strict framing, no desync, timeouts, connections.

Each test talks to a real server (in-process, loopback) with small limits, so a timeout takes a second, not ten.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from envgym.sandbox.limits import SANDBOX_LIMITS
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.service import SandboxService

TOKEN = "test-token"
LIMITS = replace(
    SANDBOX_LIMITS,
    max_connections=4,
    max_body_bytes=1 << 20,
    header_timeout_s=1.0,
    keepalive_idle_s=1.0,
    body_timeout_s=1.0,
    linger_s=0.5,
)
HEALTH = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"


@dataclass
class Address:
    host: str
    port: int

    def connect(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=10)
        sock.settimeout(10)
        return sock


@pytest.fixture
def address(tmp_path: Path) -> Iterator[Address]:
    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10))
    http = make_http_server(service, token=TOKEN, port=0, limits=LIMITS)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield Address("127.0.0.1", http.server_address[1])
    service.stopped.set()
    thread.join(10)


def read_until_closed(sock: socket.socket, within_s: float = 10.0) -> bytes:
    """Everything the server sends until it closes; fails if it keeps the connection open past `within_s`."""
    sock.settimeout(within_s)
    data = b""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        except TimeoutError:
            break
        if not chunk:
            return data
        data += chunk
    raise AssertionError(f"the server kept the connection open for {within_s:g}s; it sent {data[:200]!r}")


def statuses(data: bytes) -> list[int]:
    return [int(line.split()[1]) for line in data.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]


def post(path: str, headers: dict[str, str]) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_wrong_token_is_refused_before_any_body_is_read(address: Address) -> None:
    sock = address.connect()
    sock.sendall(post("/v1/exec", {"Authorization": "Bearer wrong", "Content-Length": "100000"}))
    # No body is sent: a server that read the body first would wait for it instead of answering.
    data = read_until_closed(sock)
    assert statuses(data) == [401] and b'"Unauthorized"' in data


@pytest.mark.parametrize("token", [TOKEN, "wrong"])
def test_a_negative_content_length_is_refused_not_read_to_eof(address: Address, token: str) -> None:
    sock = address.connect()
    sock.sendall(post("/v1/exec", {"Authorization": f"Bearer {token}", "Content-Length": "-1"}) + b"x" * 1000)
    data = read_until_closed(sock)
    assert statuses(data) == ([400] if token == TOKEN else [401])
    if token == TOKEN:
        assert b"Content-Length" in data


def test_a_refused_body_is_never_parsed_as_the_next_request(address: Address) -> None:
    sock = address.connect()
    smuggled = HEALTH * 3
    too_big = str(LIMITS.max_body_bytes + 1)
    sock.sendall(post("/v1/exec", {"Authorization": f"Bearer {TOKEN}", "Content-Length": too_big}) + smuggled)
    data = read_until_closed(sock)
    assert statuses(data) == [413] and b'"PayloadTooLarge"' in data


@pytest.mark.parametrize(
    "headers",
    [
        {"Transfer-Encoding": "chunked"},
        {"Content-Length": "5, 5"},
        {"Content-Length": "+5"},
    ],
)
def test_unbounded_or_ambiguous_framing_is_refused(address: Address, headers: dict[str, str]) -> None:
    sock = address.connect()
    sock.sendall(post("/v1/exec", {"Authorization": f"Bearer {TOKEN}", **headers}) + b"5\r\nhello\r\n0\r\n\r\n")
    assert statuses(read_until_closed(sock)) == [400]


def test_a_repeated_content_length_is_refused(address: Address) -> None:
    sock = address.connect()
    head = post("/v1/exec", {"Authorization": f"Bearer {TOKEN}", "Content-Length": "2"})
    sock.sendall(head[:-2] + b"Content-Length: 40\r\n\r\n{}")
    assert statuses(read_until_closed(sock)) == [400]


def test_oversized_headers_get_431_and_a_close(address: Address) -> None:
    sock = address.connect()
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nX-Big: " + b"a" * (LIMITS.max_header_bytes + 10) + b"\r\n\r\n")
    assert statuses(read_until_closed(sock)) == [431]


def test_a_slowloris_head_is_cut_off_at_the_header_timeout(address: Address) -> None:
    sock = address.connect()
    sock.sendall(b"GET /v1/health HTTP/1.1\r\nX-Slow: ")
    started = time.monotonic()
    closed = False
    for _ in range(100):  # one byte every 0.1 s, never a whole head, for at most 10 s
        try:
            sock.sendall(b"a")
        except OSError:
            closed = True
            break
        time.sleep(0.1)
    if not closed:
        assert statuses(read_until_closed(sock)) in ([], [408])
    assert time.monotonic() - started < LIMITS.header_timeout_s + 5


def test_a_stalled_body_gets_408_and_a_close(address: Address) -> None:
    sock = address.connect()
    sock.sendall(post("/v1/exec", {"Authorization": f"Bearer {TOKEN}", "Content-Length": "100"}) + b'{"cmd"')
    started = time.monotonic()
    assert statuses(read_until_closed(sock)) == [408]
    assert time.monotonic() - started < LIMITS.body_timeout_s + 5


def test_an_idle_keep_alive_connection_is_closed(address: Address) -> None:
    sock = address.connect()
    sock.sendall(HEALTH)
    started = time.monotonic()
    assert statuses(read_until_closed(sock)) == [200]
    assert LIMITS.keepalive_idle_s - 0.2 < time.monotonic() - started < LIMITS.keepalive_idle_s + 5


def test_at_the_connection_limit_the_longest_idle_connection_makes_room(address: Address) -> None:
    idle = [address.connect() for _ in range(LIMITS.max_connections)]
    time.sleep(0.2)
    fresh = address.connect()
    fresh.sendall(HEALTH)
    assert statuses(fresh.recv(65536)) == [200]
    assert read_until_closed(idle[0]) == b""
    for sock in [*idle, fresh]:
        sock.close()


def test_when_every_connection_is_busy_a_new_one_gets_503(address: Address) -> None:
    busy = []
    for _ in range(LIMITS.max_connections):
        sock = address.connect()
        # Authorized and mid-body: these connections are working, not idle.
        sock.sendall(post("/v1/exec", {"Authorization": f"Bearer {TOKEN}", "Content-Length": "50"}) + b"{")
        busy.append(sock)
    time.sleep(1.0)  # let the server read every head, so all four are busy, not waiting
    extra = address.connect()
    data = read_until_closed(extra)
    assert statuses(data) == [503] and b'"Unavailable"' in data
    for sock in busy:
        sock.close()
