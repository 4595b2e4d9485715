"""A bounded thread pool whose threads never hold up interpreter exit.

concurrent.futures.ThreadPoolExecutor joins its threads at exit, so one handler stuck in a tool that never returns
would keep a stopped server's process alive; SIGINT and SIGTERM must end it unconditionally.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

_Work = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class DaemonThreadPool(Executor):
    """Runs submitted calls on at most `max_workers` daemon threads, started as work arrives."""

    def __init__(self, max_workers: int, name: str = "pool") -> None:
        self._max_workers = max_workers
        self._name = name
        self._work: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._lock = threading.Lock()
        self._threads = 0
        self._closed = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError(f"{self._name}: the pool is shut down")
            self._work.put((future, fn, args, kwargs))
            if not self._idle.acquire(blocking=False) and self._threads < self._max_workers:
                self._threads += 1
                name = f"{self._name}-{self._threads}"
                threading.Thread(target=self._worker, name=name, daemon=True).start()
        return future

    def _worker(self) -> None:
        while (work := self._work.get()) is not None:
            future, fn, args, kwargs = work
            if future.set_running_or_notify_cancel():
                try:
                    result = fn(*args, **kwargs)
                except BaseException as exc:
                    future.set_exception(exc)
                else:
                    future.set_result(result)
            del work, future, fn, args, kwargs  # drop references to a finished request before waiting
            self._idle.release()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Stop taking work; idle threads exit. Running calls are not waited for (their threads are daemons)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._work.put(None)
