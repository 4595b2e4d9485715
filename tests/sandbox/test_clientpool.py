"""RemoteEnv sessions share connections: a process holds about as many connections to a server as it has calls in
flight, however many sessions it has open (`envgym.sandbox.clientpool`)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from envgym.remote import RemoteEnv
from envgym.sandbox.clientpool import MAX_ASYNC_CONNECTIONS
from tests.sandbox.serving import Served, start_serve

SESSIONS = 200
THREADS = 8


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = start_serve()
    yield server
    assert server.stop() == 0


def _connections_to(port: int) -> int:
    """Established TCP connections from this process to `port` on this host (read from /proc)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            mine.add(target[8:-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port, state, inode = int(fields[2].rsplit(":", 1)[1], 16), fields[3], fields[9]
            if remote_port == port and state == "01" and inode in mine:
                count += 1
    return count


def test_sessions_stepped_from_threads_share_a_connection_per_thread(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])
    envs = [RemoteEnv(served.url, token_file=served.token_file, timeout_s=120) for _ in range(SESSIONS)]
    local = gym.make("envgym/calculator-v0")
    expected = [local.reset(seed=i)[0] for i in range(SESSIONS)]
    got: dict[int, object] = {}

    def run(indexes: range) -> None:
        for i in indexes:
            got[i] = envs[i].reset(seed=i)[0]
            envs[i].step("2+2")

    threads = [threading.Thread(target=run, args=(range(t, SESSIONS, THREADS),)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert [got[i] for i in range(SESSIONS)] == expected
    assert _connections_to(port) <= THREADS + 1  # one per thread at most, plus the one that made the sessions
    for env in envs:
        env.close()


def test_sessions_stepped_from_one_loop_share_at_most_the_pool_size(served: Served) -> None:
    port = int(served.url.rsplit(":", 1)[1])

    async def main() -> tuple[list[object], int]:
        envs = [RemoteEnv(served.url, token_file=served.token_file, timeout_s=120) for _ in range(SESSIONS)]
        before = _connections_to(port)  # the sync pool's, which made the sessions
        resets = await asyncio.gather(*(env.areset(seed=i) for i, env in enumerate(envs)))
        await asyncio.gather(*(env.astep("3*3") for env in envs))
        held = _connections_to(port) - before
        await asyncio.gather(*(env.aclose() for env in envs))
        return [obs for obs, _ in resets], held

    observations, held = asyncio.run(main())
    local = gym.make("envgym/calculator-v0")
    assert observations == [local.reset(seed=i)[0] for i in range(SESSIONS)]
    assert 1 <= held <= MAX_ASYNC_CONNECTIONS
