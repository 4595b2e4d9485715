"""Verified tasks per minute of `envgym synth run`, next to the diversity it buys, and the acceptance checks.

The pipeline derives and executes every tool, composes and solves every task program, and verifies each task with
real episodes: the oracle, the fair planner and six negative controls. Reported next to tasks per minute: tools,
distinct masked tool signatures and their growth with the number of domains, distinct task program shapes, the
near-duplicate rate of instructions, counts per operator and the rejections by each control (`synth.stats`), also
written to synth_stats.md and signature_curve.png beside the suite. With `--check`, every env also passes check_env
through gym.make. Baseline: replaying every reference solution once.
Run: python benchmarks/synth.py [--domains 20] [--tasks-per-env 24] [--workers 2] [--check] [--out DIR]
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
from envgym.registry import env_dirs
from envgym.world.replay import replay_solution

# Run as a script, this file's folder comes first on sys.path and its name would shadow the `synth` package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from synth.pipeline import SynthConfig, run_pipeline  # noqa: E402 (after the sys.path fix)
from synth.report import write_report  # noqa: E402
from synth.stats import collect_stats  # noqa: E402


def replay_all(root: Path) -> tuple[int, float]:
    """(tasks, seconds) to replay every reference solution once."""
    start, n = time.perf_counter(), 0
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        for task in data.tasks:
            replay_solution(data.executor, data.initial, task)
            n += 1
    return n, time.perf_counter() - start


def check_all(root: Path) -> dict[str, object]:
    """check_env on every env, through gym.make."""
    start = time.perf_counter()
    checked = 0
    for eid in envgym.register_dir(root, override=True):
        env = gym.make(eid)
        check_env(env.unwrapped, skip_render_check=True)
        env.close()
        checked += 1
    return {"envs_check_env_passed": checked, "check_env_s": round(time.perf_counter() - start, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--domains", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--tasks-per-env", type=int, default=24)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--check", action="store_true", help="also run check_env on every env")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="synth-bench-")) / "suite"
    config = SynthConfig(seed=args.seed, domains=args.domains, tasks_per_env=args.tasks_per_env)
    start = time.perf_counter()
    summary = run_pipeline(config, out, workers=args.workers)
    pipeline_s = time.perf_counter() - start
    stats = collect_stats(out)
    result: dict[str, object] = {
        "config": config.model_dump(mode="json"), "workers": args.workers, "pipeline_s": round(pipeline_s, 2),
        "verified_tasks_per_min": round(summary["tasks"] / pipeline_s * 60, 1),
        **{k: summary[k] for k in ("tools", "tools_rejected", "tasks_sampled", "tasks", "tasks_rejected_by")},
        **{k: stats[k] for k in ("distinct_tool_signatures", "signature_curve", "task_program_shapes",
                                 "instruction_near_duplicate_rate", "tools_by_operator", "tools_by_mutation",
                                 "domains_by_structural_operator")},
    }
    if args.check:
        tasks, replay_s = replay_all(out)
        result |= {"replay_only_tasks_per_min": round(tasks / replay_s * 60, 1), **check_all(out)}
    result["report"] = write_report(stats, out.parent, f"synth benchmark: {args.domains} domains, seed {args.seed}")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
