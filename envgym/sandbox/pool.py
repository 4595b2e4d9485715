"""A warm pool of started sandboxes: `acquire` hands out a ready one, `release` resets and returns it."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from envgym.sandbox.base import Sandbox, SandboxBackend
from envgym.sandbox.errors import SandboxError
from envgym.sandbox.spec import SandboxSpec


class SandboxPool:
    """Keeps up to `size` idle sandboxes of one spec started, refilling in the background.

    `acquire` takes an idle sandbox (or starts one when none is ready within `wait_s`); `release`
    resets it (processes killed, workspace emptied) and puts it back, or closes it when the pool is
    full or the reset fails. `close` closes idle sandboxes; acquired ones belong to their holder.
    """

    def __init__(self, backend: SandboxBackend, spec: SandboxSpec, size: int = 4, starters: int = 2) -> None:
        if size < 1:
            raise ValueError(f"size: expected at least 1, got {size}")
        self.backend = backend
        self.spec = spec
        self.size = size
        self._idle: queue.Queue[Sandbox] = queue.Queue()
        self._lock = threading.Lock()
        self._starting = 0
        self._closed = False
        self._executor = ThreadPoolExecutor(max_workers=starters, thread_name_prefix="sandbox-pool")
        self._refill()

    def _refill(self) -> None:
        with self._lock:
            if self._closed:
                return
            missing = self.size - self._idle.qsize() - self._starting
            self._starting += max(missing, 0)
        for _ in range(max(missing, 0)):
            self._executor.submit(self._start_one)

    def _start_one(self) -> None:
        try:
            box = self.backend.create(self.spec)
        finally:
            with self._lock:
                self._starting -= 1
        with self._lock:
            keep = not self._closed
        if keep:
            self._idle.put(box)
        else:
            box.close()

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Block until `size` sandboxes are idle (useful before measuring acquire latency)."""
        deadline = time.monotonic() + timeout_s
        while self._idle.qsize() < self.size and time.monotonic() < deadline:
            time.sleep(0.05)
        if self._idle.qsize() < self.size:
            raise SandboxError(
                f"pool: only {self._idle.qsize()}/{self.size} sandboxes ready after {timeout_s:g}s"
            )

    def acquire(self, wait_s: float = 0.5) -> Sandbox:
        if self._closed:
            raise SandboxError("pool: closed")
        try:
            box = self._idle.get(timeout=wait_s)
        except queue.Empty:
            box = self.backend.create(self.spec)
        self._refill()
        return box

    def release(self, box: Sandbox) -> None:
        if box.closed:
            self._refill()
            return
        try:
            box.reset()
        except SandboxError:
            box.close()
            self._refill()
            return
        with self._lock:
            keep = not self._closed and self._idle.qsize() + self._starting < self.size
        if keep:
            self._idle.put(box)
        else:
            box.close()

    @contextlib.contextmanager
    def sandbox(self) -> Iterator[Sandbox]:
        box = self.acquire()
        try:
            yield box
        finally:
            self.release(box)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=True)
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                break

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
