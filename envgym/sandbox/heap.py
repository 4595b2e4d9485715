"""Short collector pauses in a process that holds thousands of env sessions (`envgym serve` and its workers).

CPython's full collection walks every tracked object that is not frozen. A retail session holds about 90 of them,
so a worker with 8,000 sessions walked some 800,000 objects a few times a minute, 1 s a time under load, and every
request waited. Almost all of them live as long as their session: they are not garbage, walking them finds none.

`HeapKeeper` keeps them out of the walk (`gc.freeze`): the heap that survived start-up is frozen at the first
session, the heap again each time the sessions held have grown by a tenth or a tenth of them have begun an episode,
and whatever survives a full collection right after it, so a full collection walks only what has become long-lived
since. The price is that a cycle made of frozen objects that later becomes garbage is not found until the next
sweep (`gc.unfreeze` and one full collection), which walks the whole heap with every thread stopped: 80 to 300 ms
in a soaked worker (benchmarks/soak.py), a stall every request on that worker waits out.

So a sweep runs only when it finds something. envgym's own environments leave no cyclic garbage when a session
closes, steps or resets (a closed retail session once left 76 objects, held by a bound method of the env in its
own tool-call log; that cycle is gone and a test keeps it gone). A sweep runs once `sweep_min` sessions have closed
since the last one, and each sweep that finds less than one unreachable object per closed session makes the next
one wait for `sweep_backoff` times as many closes (up to `sweep_max`); one that finds more starts over at
`sweep_min`. An environment whose sessions leave cycles is swept as often as before; one whose sessions leave none
is swept about once per `sweep_max` closes. A sweep also runs once the frozen heap has grown `sweep_growth` times
since the last one (whatever else left cycles behind). Memory closed sessions free by reference counting goes back
to the system (`malloc_trim`) every `sweep_min` closes, on a thread of its own: it needs no GIL and the request
that closed the session does not wait for it.
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from envgym.sandbox.malloc import release_free_memory


class HeapKeeper:
    """Freezes the long-lived heap of an env-session host; `created` and `closed` are told of sessions.

    Args:
        gen0_threshold: net allocations between young collections (None keeps CPython's 700). With the sessions
            frozen, 10,000 took the collector's share of a worker's time stepping 8,000 retail sessions from 3.4%
            to 0.2%, with no generation-1 or full collection in 30 s (docs/results/sessions.md): a step's
            temporary objects die before a young collection would promote them.
        freeze_growth: freeze again once the sessions held have grown this many times over (plus 64) since the
            last freeze on creation, and once that share of them (a tenth) has begun an episode since the last
            freeze on reset: a new session's or episode's objects are long-lived, so they are frozen without
            waiting for a full collection to walk them first.
        sweep_churn: sweep once closed sessions reach this share of the sessions held (at least the current
            interval: `sweep_min`, backed off up to `sweep_max` while sweeps find no garbage).
        sweep_backoff: how much longer the next interval is after a sweep that found under one unreachable object
            per closed session.
        sweep_growth: sweep once the frozen heap has grown this many times over since the last sweep.
    """

    def __init__(
        self,
        gen0_threshold: int | None = 10_000,
        freeze_growth: float = 1.1,
        sweep_churn: float = 0.25,
        sweep_min: int = 256,
        sweep_max: int = 65_536,
        sweep_backoff: float = 4.0,
        sweep_growth: float = 4.0,
    ) -> None:
        self.gen0_threshold, self.freeze_growth = gen0_threshold, freeze_growth
        self.sweep_churn, self.sweep_min, self.sweep_growth = sweep_churn, sweep_min, sweep_growth
        self.sweep_max, self.sweep_backoff = sweep_max, sweep_backoff
        self.sweeps = 0
        self.sweep_interval = sweep_min  # closes between churn sweeps, backed off while they find nothing
        self._lock = threading.Lock()
        self._sweeping = False
        self._installed = False
        self._closed_since_sweep = 0
        self._closed_since_trim = 0
        self._trim_due = threading.Event()
        self._trimmer: threading.Thread | None = None
        self._frozen_at_sweep = 0
        self._sweep_due = False  # set by the collector's callback, acted on at the next create or close
        self._frozen_live = 0  # sessions held at the last freeze on creation
        self._resets = 0  # episodes begun since the last freeze on reset
        self.freeze_growth_resets = freeze_growth - 1

    def created(self, live: int) -> None:
        """A session was made; `live` are held now. The first one ends the warm-up: the start-up heap is frozen."""
        with self._lock:
            if not self._installed:
                self._installed, self._frozen_live = True, live
                self._install()
                return
            due = self._sweep_due
            if not due and live >= self.freeze_growth * self._frozen_live + 64:
                # New sessions are long-lived: frozen now rather than walked by full collections until one runs.
                self._frozen_live = live
                gc.freeze()
        if due:
            self.sweep()

    def _install(self) -> None:
        if self.gen0_threshold is not None:
            _, gen1, gen2 = gc.get_threshold()
            gc.set_threshold(self.gen0_threshold, gen1, gen2)
        gc.collect()
        gc.freeze()
        self._frozen_at_sweep = gc.get_freeze_count()
        gc.callbacks.append(self._after_collection)

    def reset(self, live: int) -> None:
        """An episode began; `live` sessions are held. Once a tenth of them (at least 64) have begun one since the
        last freeze, the heap is frozen again: episode data lives as long as its episode, and would otherwise pile
        up until a full collection walked all of it (once, hundreds of milliseconds at 16,000 sessions). An episode
        that ends frees its data by reference counting, frozen or not."""
        if not self._installed:
            return
        self._resets += 1  # under the GIL; a lost count only delays a freeze
        if self._resets < max(64, self.freeze_growth_resets * live):
            return
        with self._lock:
            self._resets = 0
            due = self._sweep_due
            if not due:
                gc.freeze()
        if due:
            self.sweep()

    def closed(self, count: int, live: int) -> None:
        """`count` sessions were closed (or reaped); `live` are held now."""
        with self._lock:
            if not self._installed:
                return
            self._closed_since_sweep += count
            self._closed_since_trim += count
            if self._closed_since_trim >= self.sweep_min:
                self._closed_since_trim = 0
                self._trim_soon()
            churned = self._closed_since_sweep >= max(
                self.sweep_interval, self.sweep_churn * (live + self._closed_since_sweep)
            )
            if not (churned or self._sweep_due):
                return
        self._collect()

    def sweep(self) -> None:
        """Unfreeze and collect everything once (the cycles closed sessions left), then freeze what survived and give
        the C heap's free pages back to the system (here, before returning)."""
        self._collect()
        release_free_memory()

    def _collect(self) -> int:
        """The collecting half of a sweep; returns the unreachable objects it found (0 when another thread is
        sweeping: one sweep at a time, or the second would unfreeze what the first is walking)."""
        with self._lock:
            if self._sweeping:
                return 0
            self._sweeping = True
            closed, self._closed_since_sweep, self._sweep_due = self._closed_since_sweep, 0, False
            self.sweeps += 1
        try:
            gc.unfreeze()
            found = gc.collect()  # _after_collection freezes the survivors
            self._frozen_at_sweep = gc.get_freeze_count()
        finally:
            with self._lock:
                self._sweeping = False
        with self._lock:
            if closed and found < closed:  # closed sessions left (almost) no cycles: sweep less often
                self.sweep_interval = min(self.sweep_max, int(self.sweep_interval * self.sweep_backoff))
            elif closed:
                self.sweep_interval = self.sweep_min
        return found

    def _trim_soon(self) -> None:
        """Wake the trimming thread (started on first use): closed sessions' pages go back without the caller
        waiting. Called under self._lock."""
        if self._trimmer is None:
            self._trimmer = threading.Thread(target=self._trim_forever, name="envgym-heap-trim", daemon=True)
            self._trimmer.start()
        self._trim_due.set()

    def _trim_forever(self) -> None:
        while True:
            self._trim_due.wait()
            self._trim_due.clear()
            release_free_memory()  # ctypes drops the GIL: requests go on meanwhile

    def uninstall(self) -> None:
        """Stop freezing (tests); what is frozen stays frozen until `gc.unfreeze`."""
        if self._after_collection in gc.callbacks:
            gc.callbacks.remove(self._after_collection)

    def _after_collection(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2:
            return
        gc.freeze()  # what survived a full collection is reachable now; the next one need not walk it again
        if gc.get_freeze_count() > self.sweep_growth * max(1, self._frozen_at_sweep):
            self._sweep_due = True  # not from inside the collector: the next create or close sweeps
