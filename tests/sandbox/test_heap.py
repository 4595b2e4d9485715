"""HeapKeeper: sessions' objects are frozen out of full collections, and closed sessions' cycles are still freed.

Each check runs in a fresh process: freezing is process-wide, and the test process's own heap must not be frozen.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.sandbox.serving import child_env

SCRIPT = """
import gc, json
from envgym.sandbox.heap import HeapKeeper
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.wire import EnvCreate

keeper = HeapKeeper()
host = EnvHost("envgym/calculator-v0", max_sessions=10_000, heap=keeper)
rounds = []
for manual in range(4):
    ids = [host.create(EnvCreate()).session_id for _ in range(300)]
    for sid in ids:
        host.reset(sid, seed=1, options=None)
        host.step(sid, "1+1")
    held = {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}
    for sid in ids:
        host.close(sid)
    held["automatic_sweeps"] = keeper.sweeps - manual
    keeper.sweep()  # what a later automatic sweep would find, found now
    held["after_sweep"] = gc.get_freeze_count() + len(gc.get_objects())
    rounds.append(held)
print(json.dumps(rounds))
"""


def test_sessions_are_frozen_and_closed_sessions_do_not_pile_up() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=child_env(), timeout=300, check=True
    )
    rounds = json.loads(out.stdout)
    # While held, most of the heap is frozen: full collections do not walk the sessions.
    assert all(r["frozen"] > r["tracked"] for r in rounds), rounds
    # Closing 300 sessions (more than sweep_min) sweeps on its own, and a sweep frees the cycles closed sessions
    # left frozen: the heap does not grow round after round.
    assert all(r["automatic_sweeps"] >= 1 for r in rounds), rounds
    first, last = rounds[0]["after_sweep"], rounds[-1]["after_sweep"]
    assert last < first * 1.02, rounds


EPISODES = """
import gc, json
from envgym.sandbox.heap import HeapKeeper
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.wire import EnvCreate

host = EnvHost("envgym/calculator-v0", max_sessions=10_000, heap=HeapKeeper())
ids = [host.create(EnvCreate()).session_id for _ in range(400)]
for episode in range(2):
    for sid in ids:
        host.reset(sid, seed=episode, options=None)
print(json.dumps({"tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}))
"""


def test_episode_data_is_frozen_as_episodes_begin() -> None:
    out = subprocess.run(
        [sys.executable, "-c", EPISODES], capture_output=True, text=True, env=child_env(), timeout=300, check=True
    )
    heap = json.loads(out.stdout)
    # 800 episodes leave about 26 objects each (10,500 tracked without freezing on reset); a full collection would
    # walk whatever is not frozen. Frozen each time a tenth of the sessions (at least 64) began an episode, what is
    # left unfrozen is under a tenth of that.
    assert heap["tracked"] < 2_000, heap


TRIM = """
import json
from envgym.sandbox.heap import HeapKeeper

def rss_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

blocks = [bytes(2000) for _ in range(32_000)]  # 64 MB of C-heap blocks: over pymalloc's 512 bytes, under mmap's
kept = blocks[15::16]  # one in 16 stays, the last among them: the heap's top is never free, so nothing trims it
del blocks
before = rss_mb()
HeapKeeper().sweep()
print(json.dumps({"before": before, "after": rss_mb()}))
"""


def test_a_sweep_gives_freed_heap_pages_back() -> None:
    """Closed sessions' memory freed in the middle of glibc's heap stays resident unless trimmed: the creep of a
    soaked server's RSS (benchmarks/soak.py). A sweep, which follows sessions closing, gives it back."""
    out = subprocess.run(
        [sys.executable, "-c", TRIM], capture_output=True, text=True, env=child_env(), timeout=300, check=True
    )
    rss = json.loads(out.stdout)
    assert rss["before"] - rss["after"] > 30, rss  # 60 MB freed; without the trim nothing leaves
