"""Rollout generation with the buffered key/value cache against the concatenating cache it replaced, same run.

`CachedSampler` now writes each decode step's keys and values into buffers sized once per call; before, it used
transformers' `DynamicCache`, whose every update concatenates, copying the whole cache of every row at every step
(~46 KB a token for SmolLM2-135M, so ~70 MB a row at 1,500 tokens). This runs GRPO groups of the multi-turn suite
`train_multiturn.py` trains on (SmolLM2-135M base weights, 10-turn cap, 64 new tokens a turn) with both caches,
alternating which goes first, after checking that greedy rollouts come out token for token the same. Prints
seconds per group and the ratio (old / new: above 1 means the buffered cache is faster).

Run: python experiments/rollout_cache.py [--groups 3] [--group-size 6] [--temperature 1.0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from rich.console import Console
from rich.table import Table
from train_multiturn import build  # beside this script
from transformers import DynamicCache

from envgym.train.generation import CachedSampler
from envgym.train.policy import load_policy
from envgym.train.rollout import RolloutLimits, run_group


class ConcatSampler(CachedSampler):
    """The sampler before the change: the same prefix caching over transformers' concatenating `DynamicCache`."""

    def new_cache(self, lm: Any, capacity: int, past: Any) -> DynamicCache:
        return DynamicCache(ddp_cache_data=past) if past is not None else DynamicCache()


def rollout(sampler: CachedSampler, envs: list[Any], task: str, limits: RolloutLimits, temperature: float,
            seed: int) -> tuple[float, list[list[int]]]:
    started = time.perf_counter()
    episodes = run_group(envs, [task] * len(envs), sampler, limits, temperature=temperature, seed=seed)
    return time.perf_counter() - started, [[t for s in e.samples for t in s.token_ids] for e in episodes]


MULTITURN_LIMITS = RolloutLimits(max_new_tokens=64, max_sequence_tokens=2048, max_turns=10)  # train_multiturn's


def add_rollout_args(parser: argparse.ArgumentParser) -> None:
    """The options every rollout benchmark of the multi-turn suite takes."""
    parser.add_argument("--group-size", type=int, default=6)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)


def multiturn_envs(root: Path, count: int, threads: int) -> tuple[list[Any], list[str]]:
    """`count` envs of the suite `train_multiturn.py` trains on (synthesis seed 1), built under `root`, and its
    task ids; torch on `threads` threads, hubs offline."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(threads)
    env_id, _ = build(argparse.Namespace(synth_seed=1, synth_tasks=500, heldout=24, seed=0), root)
    envs = [gym.make(env_id) for _ in range(count)]
    return envs, [task.id for task in envs[0].unwrapped.data.tasks]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=3, help="timed groups (tasks), each with both caches")
    add_rollout_args(parser)
    args = parser.parse_args()
    console = Console()
    with tempfile.TemporaryDirectory() as tmp:
        envs, all_tasks = multiturn_envs(Path(tmp), args.group_size, args.threads)
        tasks = all_tasks[: args.groups]
        model, tokenizer = load_policy("local", 0)
        samplers = {"concatenating (before)": ConcatSampler(model, tokenizer),
                    "buffered (now)": CachedSampler(model, tokenizer)}
        limits = MULTITURN_LIMITS
        greedy = [rollout(s, envs, tasks[0], limits, 0.0, 0)[1] for s in samplers.values()]
        if greedy[0] != greedy[1]:
            raise SystemExit("the two caches sampled different greedy tokens: the buffered cache is wrong")
        console.print(f"greedy group on {tasks[0]}: both caches sampled the same {sum(map(len, greedy[0]))} tokens")
        table = Table("task", *samplers, "ratio (before / now)", "tokens (before, now)")
        ratios = []
        for index, task in enumerate(tasks):
            names = list(samplers) if index % 2 == 0 else list(reversed(samplers))
            timed = {name: rollout(samplers[name], envs, task, limits, args.temperature, 100 + index) for name in names}
            (before, before_tokens), (now, now_tokens) = (timed[name] for name in samplers)
            ratios.append(before / now)
            table.add_row(task, f"{before:.1f} s", f"{now:.1f} s", f"{before / now:.2f}x",
                          f"{sum(map(len, before_tokens))}, {sum(map(len, now_tokens))}")
        console.print(table)
        console.print(f"median ratio {statistics.median(ratios):.2f}x over {len(ratios)} groups of "
                      f"{args.group_size} (load {os.getloadavg()[0]:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
