"""HeapKeeper: sessions' objects are frozen out of full collections, and closed sessions' cycles are still freed.

Each check runs in a fresh process: freezing is process-wide, and the test process's own heap must not be frozen.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.sandbox.serving import child_env

SCRIPT = """
import gc, json, sys
import gymnasium as gym
from envgym.sandbox.heap import HeapKeeper
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.wire import EnvCreate


class Loopy(gym.Env):
    \"\"\"A third-party env whose sessions leave cycles when they close (it holds itself).\"\"\"
    action_space = observation_space = gym.spaces.Discrete(2)

    def __init__(self):
        self.me = {"env": self, "junk": [[] for _ in range(20)]}

    def reset(self, *, seed=None, options=None):
        return 0, {}

    def step(self, action):
        return 0, 0.0, False, False, {}


gym.register("test/loopy-v0", entry_point=Loopy)
env_id = sys.argv[1]
keeper = HeapKeeper()
host = EnvHost(env_id, max_sessions=10_000, heap=keeper)
rounds = []
for manual in range(4):
    before = keeper.sweeps
    ids = [host.create(EnvCreate()).session_id for _ in range(300)]
    for sid in ids:
        host.reset(sid, seed=1, options=None)
        host.step(sid, 0 if env_id.startswith("test/") else "1+1")
    held = {"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects())}
    for sid in ids:
        host.close(sid)
    held["automatic_sweeps"] = keeper.sweeps - before
    keeper.sweep()  # what a later automatic sweep would find, found now
    held["after_sweep"] = gc.get_freeze_count() + len(gc.get_objects())
    held["interval"] = keeper.sweep_interval
    rounds.append(held)
print(json.dumps(rounds))
"""


def _rounds(env_id: str) -> list[dict[str, int]]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, env_id], capture_output=True, text=True, env=child_env(),
                         timeout=300, check=True)
    return list(json.loads(out.stdout))


def test_sessions_are_frozen_and_sweeps_back_off_when_closed_sessions_leave_no_cycles() -> None:
    rounds = _rounds("envgym/calculator-v0")
    # While held, most of the heap is frozen: full collections do not walk the sessions.
    assert all(r["frozen"] > r["tracked"] for r in rounds), rounds
    # Closed calculator sessions are freed by reference counting: the first sweep (after 256 closes) finds nothing,
    # so the next waits longer, and 1,200 closes stall the worker for one sweep, not four.
    assert rounds[0]["automatic_sweeps"] == 1 and sum(r["automatic_sweeps"] for r in rounds[1:]) == 0, rounds
    assert rounds[-1]["interval"] > rounds[0]["interval"] >= 4 * 256, rounds
    first, last = rounds[0]["after_sweep"], rounds[-1]["after_sweep"]
    assert last < first * 1.02, rounds  # and nothing piles up


def test_sessions_that_leave_cycles_are_still_swept_as_often_as_before() -> None:
    rounds = _rounds("test/loopy-v0")
    # Every sweep finds the closed sessions' cycles: the interval stays at sweep_min and each round of 300 closes
    # sweeps on its own; what the cycles held is freed, round after round.
    assert all(r["automatic_sweeps"] >= 1 and r["interval"] == 256 for r in rounds), rounds
    first, last = rounds[0]["after_sweep"], rounds[-1]["after_sweep"]
    assert last < first * 1.02, rounds


CYCLES = """
import gc, json, sys
import gymnasium as gym
import envgym
from envgym.play.policies import OraclePolicy

found = {}
for env_id in sys.argv[1:]:
    def episode(task):
        env = gym.make(env_id)
        policy = OraclePolicy()
        obs, info = env.reset(seed=0, options={"task_id": task})
        for _ in range(40):
            obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
            if terminated or truncated:
                break
        env.close()
        return reward
    probe = gym.make(env_id)
    tasks = [t.id for t in probe.unwrapped.data.tasks][:6]
    probe.close()
    del probe
    episode(tasks[0])  # caches filled once (targets, scripts): not garbage
    gc.collect()
    rewards = [episode(task) for task in tasks]
    found[env_id] = {"garbage": gc.collect(), "rewards": rewards}
print(json.dumps(found))
"""


def test_a_closed_envgym_env_leaves_no_cyclic_garbage() -> None:
    """A closed env is freed by reference counting, not left for a full collection (which an env server pays
    for with a stall of every request: HeapKeeper sweeps only when sweeps find something). The reference
    solution's whole episode is played first, so every tool path, the guard and the grader have run."""
    ids = ["envgym/calculator-v0", "envgym/retail-v0", "envgym/travel-v0", "envgym/workspace-v0"]
    out = subprocess.run([sys.executable, "-c", CYCLES, *ids], capture_output=True, text=True, env=child_env(),
                         timeout=300, check=True)
    found = json.loads(out.stdout)
    for env_id in ids:
        assert found[env_id]["rewards"] == [1.0] * 6, found  # the episodes were played to success
        assert found[env_id]["garbage"] == 0, found


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
