"""Every task of every bundled environment: the oracle scores 1.0, a refusing policy 0.0, and the task files are
exactly what the seeded generators produce."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.registry import bundled_dir, env_dirs
from envgym.world import load_module
from envgym.world.files import dump_tasks

BUNDLED = [p.name for p in env_dirs(bundled_dir()) if (p / "generate.py").exists()]


@pytest.mark.parametrize("name", BUNDLED)
def test_oracle_scores_one_and_refusal_zero_on_every_task(name: str) -> None:
    env = gym.make(f"envgym/{name}-v0")
    data = env.unwrapped.data
    failures = []
    for task in data.tasks:
        oracle = run_episode(env, OraclePolicy(), options={"task_id": task.id})
        refuse = run_episode(env, RefusePolicy(), options={"task_id": task.id})
        if oracle.reward != 1.0 or refuse.reward != 0.0:
            failures.append((task.id, oracle.reward_components, refuse.reward))
    assert not failures
    assert len(data.tasks) >= {"calculator": 200}.get(name, 30)


@pytest.mark.parametrize("name", BUNDLED)
def test_task_files_are_reproduced_by_their_generators(name: str, tmp_path) -> None:
    folder = bundled_dir() / name
    module = load_module(folder, "generate")
    dump_tasks(module.generate_tasks(load_environment(str(folder))), tmp_path / "tasks.jsonl")
    assert (tmp_path / "tasks.jsonl").read_bytes() == (folder / "tasks.jsonl").read_bytes()
