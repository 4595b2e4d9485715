"""The rubric's quick check (`passes`, asked after every turn) agrees with the full grade at every step."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envgym  # noqa: F401 - registers the bundled environments
from envgym.play.controls import NEGATIVE_CONTROLS, negative_control
from envgym.play.policies import OraclePolicy, Policy
from envgym.rewards.rubric import grade, passes, total_reward


@pytest.mark.parametrize("name", ["retail", "travel", "workspace"])
def test_passes_is_a_reward_of_one_at_every_step_of_every_control(name: str) -> None:
    env = gym.make(f"envgym/{name}-v0", max_steps=14)
    inner, data = env.unwrapped, env.unwrapped.data
    seen: set[bool] = set()
    for task in data.tasks[::6]:
        policies: list[Policy] = [OraclePolicy(data), *(negative_control(c, data) for c in NEGATIVE_CONTROLS)]
        for policy in policies:
            obs, info = env.reset(seed=0, options={"task_id": task.id})
            done = False
            while not done:
                obs, _, terminated, truncated, info = env.step(policy.act(obs, info))
                done = terminated or truncated
                args = (inner.task, inner.state, inner.security.target_hash(inner.task), inner.messages)
                rules = {"world": data.world, "results": inner.tool_results}
                quick = passes(*args, **rules)
                assert quick == (total_reward(grade(*args, **rules)) == 1.0), (task.id, type(policy).__name__)
                seen.add(quick)
    assert seen == {True, False}
