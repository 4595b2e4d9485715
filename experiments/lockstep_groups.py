"""A GRPO step's groups rolled out in one lockstep batch against group after group, same run, same tasks and seeds.

`GRPOConfig.lockstep_groups` runs the episodes of every group of a step together (`envgym.train.rollout.run_groups`):
each turn of all of them is one generation, 18 rows for three groups of 6, where the default makes three
generations of 6 rows. On a CPU one decode step of SmolLM2-135M costs much the same for 18 rows as for 6 (the
time goes to per-layer op overhead and reading weights more than to the rows), so a step's rollouts sample more
tokens a second; how much less time they take also depends on how long the longest episode of the batch runs.
Measured on an idle 2-core machine with a run's warm-started weights: 1.45x the sampled tokens a second (median of
3 steps, 1.44-1.47x), 1.27x less time (1.27-1.90x; the episodes differ).

This runs the multi-turn suite `train_multiturn.py` trains on (SmolLM2-135M base weights, 10-turn cap, 64 new
tokens a turn, temperature 1.0): for each of `--steps` steps, the same three tasks and group seeds both ways,
alternating which goes first. Sampled episodes differ between the two (one sampling stream for the batch instead of
one per group), so it prints the seconds, the tokens sampled, and the ratio of seconds and of sampled tokens a
second (group after group / lockstep: above 1 means lockstep is faster).

`--weights FILE` loads a state dict first, e.g. a run's warm-started policy (its checkpoint's `reference.pt`), whose
episodes follow the task's protocol over several turns as in training; without it, the base model's.

Run: python experiments/lockstep_groups.py [--steps 3] [--tasks-per-step 3] [--group-size 6] [--weights FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table
from rollout_cache import MULTITURN_LIMITS, add_rollout_args, multiturn_envs  # beside this script

from envgym.train.generation import CachedSampler
from envgym.train.policy import load_policy
from envgym.train.rollout import Group, RolloutLimits, run_groups


def roll(sampler: CachedSampler, envs: list[Any], tasks: list[str], seeds: list[int], limits: RolloutLimits,
         temperature: float, lockstep: bool) -> tuple[float, int, list[Group]]:
    size = len(envs) // len(tasks)
    spans = [(0, len(tasks))] if lockstep else [(k, k + 1) for k in range(len(tasks))]
    started = time.perf_counter()
    groups = [g for a, b in spans for g in run_groups(envs[: (b - a) * size], tasks[a:b], seeds[a:b], sampler, limits,
                                                      temperature=temperature)]
    seconds = time.perf_counter() - started
    return seconds, sum(e.sampled_tokens for g in groups for e in g.episodes), groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps, each rolled out both ways")
    parser.add_argument("--tasks-per-step", type=int, default=3)
    add_rollout_args(parser)
    parser.add_argument("--weights", type=Path, help="a state dict to load (default: the base SmolLM2-135M weights)")
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        envs, all_tasks = multiturn_envs(Path(tmp), args.group_size * args.tasks_per_step, args.threads)
        model, tokenizer = load_policy("local", 0)
        if args.weights is not None:
            model.load_state_dict(torch.load(args.weights, weights_only=True))
        sampler = CachedSampler(model, tokenizer)
        limits = MULTITURN_LIMITS
        table = Table("step", "group after group", "lockstep", "seconds ratio", "tokens (after, lockstep)",
                      "tokens/s ratio", "success (after, lockstep)")
        time_ratios, rate_ratios = [], []
        for step in range(args.steps):
            tasks = all_tasks[step * args.tasks_per_step :][: args.tasks_per_step]
            seeds = [100_003 * 7 + step * args.tasks_per_step + k for k in range(len(tasks))]
            order = [False, True] if step % 2 == 0 else [True, False]
            timed = {lockstep: roll(sampler, envs, tasks, seeds, limits, args.temperature, lockstep) for lockstep in order}
            (after, after_tokens, after_groups), (lock, lock_tokens, lock_groups) = timed[False], timed[True]
            time_ratios.append(after / lock)
            rate_ratios.append((lock_tokens / lock) / (after_tokens / after))
            wins = [sum(e.success for g in groups for e in g.episodes) for groups in (after_groups, lock_groups)]
            table.add_row(str(step), f"{after:.1f} s", f"{lock:.1f} s", f"{after / lock:.2f}x",
                          f"{after_tokens}, {lock_tokens}", f"{rate_ratios[-1]:.2f}x", f"{wins[0]}, {wins[1]}")
        console.print(table)
        console.print(
            f"median over {args.steps} steps of {args.tasks_per_step} groups of {args.group_size}: seconds "
            f"{statistics.median(time_ratios):.2f}x, sampled tokens a second {statistics.median(rate_ratios):.2f}x "
            f"(load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
