"""Which environments wait: their resets and steps leave the event loop for the handler threads.

An env server runs resets and steps on its event loop: a hand-off to a handler thread and back costs more CPU than a
quick step, and one process steps one environment at a time anyway (the GIL). An environment that waits inside its
calls (a model, the network, a subprocess, a sleep) would hold up every other session meanwhile, so each call is
watched: one that slept (a voluntary context switch) for longer than `WAIT_LIMIT_S` beyond its own CPU time is a
wait, and `STRIKES` waits within `WINDOW` calls of an environment move its calls to the handler threads for good.
Preemption is not a wait (no voluntary switch), and a wait for the GIL or a lock happens now and then on a loaded
machine, never three times in a hundred calls; an environment that really waits is caught within a few calls.
"""

from __future__ import annotations

import resource
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

WAIT_LIMIT_S = 0.005
STRIKES = 3
WINDOW = 100


class WaitWatch:
    """Watches the calls of each environment id (see the module docstring). While `excused()` is true a wait is not
    counted: the host is running something on another thread (a gymnasium.make) that takes the GIL in turns."""

    def __init__(self, excused: Callable[[], bool] = lambda: False) -> None:
        self._excused = excused
        self._waiting: set[str] = set()
        self._calls: dict[str, int] = {}
        self._strikes: dict[str, deque[int]] = {}
        self._lock = threading.Lock()

    def inline(self, env_id: str) -> bool:
        """Whether calls of `env_id` may run on the event loop: it has not been caught waiting."""
        return env_id not in self._waiting

    def call(self, env_id: str, what: str, fn: Callable[[], T]) -> T:
        """`fn()`, watched for a wait unless `env_id` is already known to wait; `what` names the call in the log."""
        if env_id in self._waiting:
            return fn()
        before, started = resource.getrusage(resource.RUSAGE_THREAD), time.perf_counter()
        try:
            return fn()
        finally:
            wall = time.perf_counter() - started
            # Most calls take less than the limit in all: they cannot have waited longer, and cost one getrusage.
            calls = self._calls[env_id] = self._calls.get(env_id, 0) + 1  # a count lost to a race is harmless
            if wall > WAIT_LIMIT_S:
                after = resource.getrusage(resource.RUSAGE_THREAD)
                blocked = wall - (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
                if after.ru_nvcsw > before.ru_nvcsw and blocked > WAIT_LIMIT_S and not self._excused():
                    self._strike(env_id, what, calls, blocked)

    def _strike(self, env_id: str, what: str, calls: int, blocked: float) -> None:
        with self._lock:
            strikes = self._strikes.setdefault(env_id, deque(maxlen=STRIKES))
            strikes.append(calls)
            if len(strikes) < STRIKES or calls - strikes[0] >= WINDOW:
                return
            self._waiting.add(env_id)
        print(
            f"envgym serve: {env_id} waited in {STRIKES} of {WINDOW} calls (this {what}: {1000 * blocked:.0f} ms); "
            "its resets and steps run on handler threads from now on",
            file=sys.stderr,
            flush=True,
        )
