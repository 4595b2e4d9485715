"""Fault tests: servers under hostile clients and sudden death, as real subprocesses on loopback.

Bounded in count and time; each measures the server process itself (its peak RSS from /proc, its answers).
"""

from __future__ import annotations

import resource
import socket
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from envgym.remote import RemoteEnv, RemoteEnvError
from tests.sandbox.serving import Served, start, start_serve

pytestmark = pytest.mark.slow

MB = 1 << 20


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"/proc/{pid}/status has no VmHWM")


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def health_latency_s(address: tuple[str, int]) -> float:
    """One health check on a fresh connection, as a readiness probe makes it: connect, ask, read the answer."""
    started = time.perf_counter()
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:100]
    return time.perf_counter() - started


def start_sandbox_server(tmp_path: Path) -> Served:
    token_file = tmp_path / "token"
    token_file.write_text("the-right-token")
    token_file.chmod(0o600)
    workspace = tmp_path / "workspace"
    argv = [
        "python3", "-m", "envgym.sandbox.server", "--port", "0", "--workspace", str(workspace),
        "--token-file", str(token_file), "--ttl", "300",
    ]
    return start(argv, r" on (http://\S+)")


def test_a_server_killed_mid_episode_raises_a_clear_error_within_the_timeout() -> None:
    server = start_serve()
    env = RemoteEnv(server.url, token_file=server.token_file, timeout_s=5)
    env.reset(seed=0)
    env.step("first")
    server.proc.kill()
    server.proc.wait()
    started = time.monotonic()
    with pytest.raises(RemoteEnvError, match="unreachable"):
        env.step("second")
    assert time.monotonic() - started < 5
    env.close()


@pytest.mark.parametrize("which", ["sandbox server", "envgym serve"])
def test_a_flood_of_large_bodies_with_a_wrong_token_keeps_the_server_small(tmp_path: Path, which: str) -> None:
    server = start_sandbox_server(tmp_path) if which == "sandbox server" else start_serve()
    address = host_port(server.url)
    body_mb = 250
    answers: list[bytes] = []

    def flood() -> None:
        with socket.create_connection(address, timeout=30) as sock:
            head = (
                f"PUT /v1/archive?dest=x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong\r\n"
                f"Content-Length: {body_mb * MB}\r\n\r\n"
            )
            sock.sendall(head.encode())
            chunk = b"\0" * MB
            try:
                for _ in range(body_mb):
                    sock.sendall(chunk)
                answers.append(sock.recv(65536))
            except OSError:
                answers.append(b"closed")  # the server stopped reading and closed: what it should do

    try:
        threads = [threading.Thread(target=flood) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(answers) == 8
        assert all(a == b"closed" or a.startswith(b"HTTP/1.1 401") for a in answers), answers
        assert health_latency_s(address) < 5
        assert peak_rss_mb(server.proc.pid) < 200
    finally:
        server.stop()


def _limit_fds(n: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


def test_idle_connections_and_a_slowloris_leave_health_checks_fast() -> None:
    # The server gets a common default of 1024 descriptors, which 1,100 idle connections used to exhaust.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2300:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
    server = start_serve(preexec_fn=_limit_fds(1024))
    address = host_port(server.url)
    stop = threading.Event()

    def slowloris() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(address, timeout=10) as sock:
                    sock.sendall(b"GET /v1/health HTTP/1.1\r\nX-Slow: ")
                    for _ in range(600):
                        if stop.wait(0.2):
                            return
                        sock.sendall(b"a")
            except OSError:
                continue  # cut off by the header timeout (or evicted): start again, as an attacker would

    idle: list[socket.socket] = []
    loris = threading.Thread(target=slowloris, daemon=True)
    try:
        for _ in range(2000):
            idle.append(socket.create_connection(address, timeout=30))
        loris.start()
        time.sleep(0.5)
        latencies = sorted(health_latency_s(address) for _ in range(100))
        p95 = latencies[94]
        assert server.proc.poll() is None, "the server exited"
        assert p95 < 0.05, f"health p95 {p95 * 1000:.1f} ms (median {statistics.median(latencies) * 1000:.1f} ms)"
    finally:
        stop.set()
        for sock in idle:
            sock.close()
        if loris.is_alive():
            loris.join(10)
        server.stop()
