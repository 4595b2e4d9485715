"""Fixtures for the reward tests: real retail trajectories of one task from the bundled environment."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

import envgym  # noqa: F401 - registers the bundled environments
from envgym.loader import load_environment
from envgym.play.episode import Trajectory, run_episode
from envgym.play.make import make_policy
from envgym.registry import find_env_dir
from envgym.rewards.judge_prompt import rubric_text

# One task, four behaviours: the reference solution, two random agents and a refusal.
RETAIL_GROUP_POLICIES = [("oracle", 0), ("random", 1), ("random", 2), ("refuse", 0)]


def retail_group(policies: list[tuple[str, int]], seed: int = 0, max_steps: int = 6) -> list[Trajectory]:
    """Trajectories of one retail task (picked by `seed`), one per (policy, policy seed).

    `max_steps` keeps the random agents' rambles short so a group fits a small judge's prompt cheaply; the
    reference solution needs four turns.
    """
    env = gym.make("envgym/retail-v0", max_steps=max_steps)
    try:
        return [
            run_episode(env, make_policy(name, seed=policy_seed), seed=seed) for name, policy_seed in policies
        ]
    finally:
        env.close()


@pytest.fixture(scope="session")
def retail_trajectories() -> list[Trajectory]:
    return retail_group(RETAIL_GROUP_POLICIES)


@pytest.fixture()
def retail_messages(retail_trajectories: list[Trajectory]) -> list[list[dict[str, Any]]]:
    return [t.messages for t in retail_trajectories]


@pytest.fixture()
def retail_tools(retail_trajectories: list[Trajectory]) -> list[dict[str, Any]]:
    return retail_trajectories[0].tools


@pytest.fixture()
def retail_rubric(retail_trajectories: list[Trajectory]) -> str | None:
    """The group's task rubric criteria as judge grading standards."""
    task = load_environment(str(find_env_dir("retail"))).task(retail_trajectories[0].task_id)
    return rubric_text(task.rubric)
