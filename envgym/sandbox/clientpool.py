"""Connections to an env server shared by every RemoteEnv of a process, the way an HTTP client's pool shares them.

A RemoteEnv used to hold a connection of its own, so 16,000 sessions were 16,000 connections: past a worker's
connection limit each new one evicted a session in its think time, which then reconnected and evicted another (a
reconnect storm). A session now borrows a connection for one call and gives it back, so a process holds about as
many connections to a worker as it has calls in flight to it, however many sessions it has.

Pools are per process (a forked child starts with none), per server (address, token, timeout, retries) and, for
asyncio, per event loop (a connection belongs to the loop that opened it). Each pooled connection is a
`KeepAliveClient` / `AsyncKeepAliveClient` with its own request ids, so a resent request still carries the id
its first attempt had.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from envgym.sandbox.akeepalive import AsyncKeepAliveClient
from envgym.sandbox.errors import SandboxUnavailableError
from envgym.sandbox.keepalive import KeepAliveClient

# A connection idle longer than this is closed instead of reused: servers close idle ones after
# ServerLimits.keepalive_idle_s (30 s), and a call sent on a connection the server has just closed costs a retry.
POOL_IDLE_S = 10.0
# Idle connections a thread pool keeps per server; more are closed when given back.
MAX_IDLE = 64
# Connections one event loop opens to one server at most; calls beyond wait their turn (within their timeout).
# A worker runs one call at a time, so more in flight only queue on its side instead of this one.
MAX_ASYNC_CONNECTIONS = 64

_Key = tuple[str, str | None, float, int]


class PooledClient:
    """Calls to one env server (`url`) over connections shared with every other PooledClient of that server in
    this process. What RemoteEnv uses of `KeepAliveClient`: `url`, `port`, `request`, `with_port` and `close`,
    plus `arequest` for asyncio. Bad urls raise ValueError, as KeepAliveClient does."""

    def __init__(self, url: str, *, token: str | None, timeout_s: float, retries: int = 1) -> None:
        self._spec = KeepAliveClient(url, token=token, timeout_s=timeout_s, retries=retries)  # checks the url
        self.url, self.host, self.port = self._spec.url, self._spec.host, self._spec.port
        self._token, self.timeout_s, self.retries = token, timeout_s, retries
        self._key: _Key = (self.url, token, timeout_s, retries)

    def with_port(self, port: int) -> PooledClient:
        """A client of the same host and token on another port (an env server's worker)."""
        spec = self._spec.with_port(port)
        return PooledClient(spec.url, token=self._token, timeout_s=self.timeout_s, retries=self.retries)

    def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        """The response body of one call on a pooled connection; error statuses raise their typed errors."""
        return _sync_pool(self._key).request(method, path, body)

    async def arequest(self, method: str, path: str, body: bytes = b"") -> bytes:
        """`request` from an event loop, on a connection of that loop's pool."""
        return await _async_pool(self._key).request(method, path, body)

    def close(self) -> None:
        """Nothing to release: the connections belong to the pool, which other sessions go on using."""


class _SyncPool:
    """Idle connections of one server, most recently used last; a call takes one (or opens one) and gives it back."""

    def __init__(self, key: _Key) -> None:
        self._key = key
        self._idle: list[tuple[float, KeepAliveClient]] = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, body: bytes) -> bytes:
        client = self._take()
        try:
            return client.request(method, path, body)
        finally:
            self._give(client)

    def _take(self) -> KeepAliveClient:
        stale: list[tuple[float, KeepAliveClient]] = []
        with self._lock:
            if self._idle and time.monotonic() - self._idle[-1][0] < POOL_IDLE_S:
                return self._idle.pop()[1]
            stale, self._idle = self._idle, []  # the freshest is too old: so are the rest
        for _, client in stale:
            client.close()
        url, token, timeout_s, retries = self._key
        return KeepAliveClient(url, token=token, timeout_s=timeout_s, retries=retries)

    def _give(self, client: KeepAliveClient) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append((time.monotonic(), client))
                return
        client.close()


class _AsyncPool:
    """`_SyncPool` for one event loop, with at most MAX_ASYNC_CONNECTIONS connections open."""

    def __init__(self, key: _Key) -> None:
        self._key = key
        self._idle: list[tuple[float, AsyncKeepAliveClient]] = []
        self._slots = asyncio.Semaphore(MAX_ASYNC_CONNECTIONS)

    async def request(self, method: str, path: str, body: bytes) -> bytes:
        url, _, timeout_s, _ = self._key
        try:
            async with asyncio.timeout(timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            raise SandboxUnavailableError(
                f"{method} {url}{path}: no connection free within {timeout_s:g}s "
                f"({MAX_ASYNC_CONNECTIONS} calls in flight to this server from this loop)"
            ) from None
        try:
            client = self._take()
            try:
                return await client.request(method, path, body)
            finally:
                self._idle.append((time.monotonic(), client))
        finally:
            self._slots.release()

    def _take(self) -> AsyncKeepAliveClient:
        if self._idle and time.monotonic() - self._idle[-1][0] < POOL_IDLE_S:
            return self._idle.pop()[1]
        stale, self._idle = self._idle, []
        for _, client in stale:
            client.abort()
        url, token, timeout_s, retries = self._key
        return AsyncKeepAliveClient(KeepAliveClient(url, token=token, timeout_s=timeout_s, retries=retries))


_SYNC_POOLS: dict[_Key, _SyncPool] = {}
# By id of the loop, with the loop itself: pools of loops that have closed are dropped on the next lookup.
_ASYNC_POOLS: dict[int, tuple[asyncio.AbstractEventLoop, dict[_Key, _AsyncPool]]] = {}
_REGISTRY_LOCK = threading.Lock()


def _sync_pool(key: _Key) -> _SyncPool:
    pool = _SYNC_POOLS.get(key)
    if pool is None:
        with _REGISTRY_LOCK:
            pool = _SYNC_POOLS.setdefault(key, _SyncPool(key))
    return pool


def _async_pool(key: _Key) -> _AsyncPool:
    loop = asyncio.get_running_loop()
    entry = _ASYNC_POOLS.get(id(loop))
    if entry is None or entry[0] is not loop:
        with _REGISTRY_LOCK:
            for loop_id, (old, _) in list(_ASYNC_POOLS.items()):
                if old.is_closed():
                    del _ASYNC_POOLS[loop_id]
            entry = _ASYNC_POOLS[id(loop)] = (loop, {})
    pools = entry[1]
    pool = pools.get(key)
    if pool is None:
        pool = pools[key] = _AsyncPool(key)
    return pool


def _forget_pools() -> None:
    """In a forked child: the parent's connections are the parent's (sharing a socket would mix two conversations)."""
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()  # another thread of the parent may have held it at the fork
    _SYNC_POOLS.clear()
    _ASYNC_POOLS.clear()


os.register_at_fork(after_in_child=_forget_pools)
