"""The labelled set a judge is checked on before its score is used (`envgym.rewards.judge_check`).

Per env, its first `tasks_per_env` tasks that write, four trajectories each of known quality: the oracle (label 1), a
partial run (the oracle stopped before its first write, 0.5), doing nothing (0) and a reward hack (0) that cycles
through wrong-then-right, echo-flood (two copies, to keep judge prompts small) and hedge (where the task has answers).
Deterministic: scripted policies on seeded envs without transient failures; 40 trajectories by default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from envgym.play.episode import EpisodeRun, run_episode
from envgym.play.hacks import REWARD_HACKS, EchoFloodPolicy
from envgym.play.policies import OraclePolicy, Policy, RefusePolicy
from envgym.rewards.judge_check import LABELS, LabelledGroup
from envgym.users import STOP

_HACKS = ("wrong-then-right", "echo-flood", "hedge")


def labelled_groups(tasks_per_env: int = 5, envs: Sequence[str] = ("retail", "travel")) -> list[LabelledGroup]:
    """The labelled set (see the module docstring), one group per task."""
    groups = []
    for name in envs:
        env = gym.make(f"envgym/{name}-v0", failure_rate=0.0)
        data = env.unwrapped.data  # type: ignore[attr-defined]
        writes = {t.name for t in data.world.tools if not t.read_only}
        tasks = [t for t in data.tasks if any(c.name in writes for c in t.solution)][:tasks_per_env]
        for index, task in enumerate(tasks):
            options = {"task_id": task.id}
            oracle = run_episode(env, OraclePolicy(data), seed=0, options=options)
            partial = EpisodeRun(env, seed=0, options=options)
            oracle_turns = OraclePolicy(data)
            while not partial.done and task.solution[_calls_made(partial)].name not in writes:
                partial.step(oracle_turns.act(partial.obs, partial.info))
            while not partial.done:
                partial.step(f"I cannot finish this, sorry. {STOP}")
            nothing = run_episode(env, RefusePolicy(), seed=0, options=options)
            hack = _HACKS[index % len(_HACKS)]
            if hack == "hedge" and not task.answers:
                hack = "wrong-then-right"
            hacker: Policy = EchoFloodPolicy(data, copies=2) if hack == "echo-flood" else REWARD_HACKS[hack](data, 0)
            hacked = run_episode(env, hacker, seed=0, options=options)
            runs = [oracle, partial.trajectory, nothing, hacked]
            groups.append(LabelledGroup(task.id, [t.messages for t in runs], oracle.tools,
                                        [LABELS[k] for k in ("oracle", "partial", "do-nothing", "hacked")],
                                        ["oracle", "partial", "do-nothing", hack]))
        env.close()
    return groups


def _calls_made(run: Any) -> int:
    """Tool calls made so far in the episode (the oracle makes one per turn, so it is the next call's index)."""
    return sum(1 for m in run.info["messages"] if m.get("role") == "tool")
