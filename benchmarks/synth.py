"""Verified tasks per minute of `envgym synth run`, next to the bare replay of the same tasks in the same run.

The pipeline samples, replays and verifies every task (reference replay, an oracle episode and a do-nothing
episode). Baseline: replaying the finished reference solutions on copies of the initial state, the irreducible
part of verification. Then the acceptance checks: every env passes check_env through gym.make and the oracle
scores 1.0 on every task. Run: python benchmarks/synth.py [--domains 20] [--seed 1] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
from gymnasium.utils.env_checker import check_env

import envgym
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.registry import env_dirs
from envgym.world.replay import replay_solution

# Run as a script, this file's folder comes first on sys.path and its name would shadow the `synth` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from synth.pipeline import SynthConfig, run_pipeline  # noqa: E402 (after the sys.path fix)


def replay_all(root: Path) -> tuple[int, float]:
    """(tasks, seconds) to replay every reference solution once."""
    start, n = time.perf_counter(), 0
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        for task in data.tasks:
            replay_solution(data.executor, data.initial, task)
            n += 1
    return n, time.perf_counter() - start


def acceptance(root: Path) -> dict[str, object]:
    """check_env on every env and the oracle on every task, through gym.make."""
    start = time.perf_counter()
    ids = envgym.register_dir(root, override=True)
    checked = scored = perfect = 0
    for eid in ids:
        env = gym.make(eid)
        check_env(env.unwrapped, skip_render_check=True)
        checked += 1
        data = env.unwrapped.data  # type: ignore[attr-defined]
        for task in data.tasks:
            reward = run_episode(env, OraclePolicy(data), options={"task_id": task.id}).reward
            scored += 1
            perfect += reward == 1.0
        env.close()
    return {"envs_check_env_passed": checked, "tasks_oracle_run": scored, "tasks_oracle_1.0": perfect,
            "acceptance_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="synth-bench-")) / "suite"
    start = time.perf_counter()
    summary = run_pipeline(SynthConfig(seed=args.seed, domains=args.domains), out, progress=False)
    pipeline_s = time.perf_counter() - start
    tasks, replay_s = replay_all(out)
    result = {
        **summary, "pipeline_s": round(pipeline_s, 2),
        "verified_tasks_per_min": round(summary["tasks"] / pipeline_s * 60, 1),
        "replay_only_tasks_per_min": round(tasks / replay_s * 60, 1),
        "ratio_pipeline_to_replay": round(replay_s / pipeline_s, 4),
        **acceptance(out),
    }
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
