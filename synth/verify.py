"""Task verification: the reference solution replays, the oracle policy scores 1.0, doing nothing scores < 1.0."""

from __future__ import annotations

from dataclasses import dataclass

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.world.spec import TaskSpec


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying one task; `keep` only when all three checks pass."""

    replayed: bool
    oracle_reward: float
    do_nothing_reward: float
    target_hash: str | None
    error: str | None = None

    @property
    def keep(self) -> bool:
        return self.replayed and self.oracle_reward == 1.0 and self.do_nothing_reward < 1.0


def verify_tasks(data: EnvironmentData) -> dict[str, Verdict]:
    """Verify every task of `data` by replay and by real episodes of the oracle and the do-nothing policies."""
    env = ToolWorldEnv(data=data)
    oracle, nothing = OraclePolicy(data), RefusePolicy()
    verdicts: dict[str, Verdict] = {}
    for task in data.tasks:
        verdicts[task.id] = _verify(env, data, task, oracle, nothing)
    env.close()
    return verdicts


def _verify(env: ToolWorldEnv, data: EnvironmentData, task: TaskSpec, oracle: OraclePolicy,
            nothing: RefusePolicy) -> Verdict:
    try:
        target = data.target_hash(task)
    except ValueError as exc:
        return Verdict(False, 0.0, 0.0, None, str(exc))
    options = {"task_id": task.id}
    good = run_episode(env, oracle, seed=0, options=options).reward
    bad = run_episode(env, nothing, seed=0, options=options).reward
    return Verdict(True, good, bad, target)
