"""A/B timing of one GRPO update (`GRPOTrainer._update`) on SmolLM2-135M, interleaved in one process (issue 43).

Builds one run-13-like group of synthetic token samples (a shared prompt prefix, then per sample ~`--length`
tokens of which about a third are trained, as assistant turns between tool observations), and times the
trainer's own update path (reference pass, policy forward, backward, optimizer step) for each variant, the
variants interleaved round by round so that a change of machine load hits all of them alike. The weights are
restored before every timed update, so every variant sees the same inputs. Prints medians of wall and CPU seconds per
update (CPU time, summed over threads, is the steadier measure on a loaded machine) and `uptime` before and after.

Variants: `f32` / `bf16` (learner_dtype), `mb1` / `mb2` / `mb4` (micro_batch_size, float32), `t1` / `t2`
(torch threads, float32). Example: `python3 experiments/learner_ab.py --variants f32,bf16 --rounds 3`.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import tempfile
import time
from typing import Any

import torch

from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.rollout import Group, TokenTrajectory
from envgym.train.tokens import TokenSample

VARIANTS: dict[str, dict[str, Any]] = {
    "f32": {"learner_dtype": "float32"},
    "bf16": {"learner_dtype": "bfloat16"},
    "mb1": {"micro_batch_size": 1},
    "mb2": {"micro_batch_size": 2},
    "mb4": {"micro_batch_size": 4},
    "t1": {"threads": 1},
    "t2": {"threads": 2},
}


def synthetic_samples(count: int, length: int, prefix: int, vocab: int, seed: int) -> list[TokenSample]:
    """`count` samples sharing `prefix` tokens, lengths spread +-20% around `length`; trained turns of 33
    tokens alternate with 66-token observations (run 13: ~30% of tokens trained)."""
    generator = torch.Generator().manual_seed(seed)
    shared = torch.randint(10, vocab, (prefix,), generator=generator).tolist()
    samples = []
    for index in range(count):
        sample = TokenSample()
        sample.extend(shared, 0)
        target = int(length * (0.8 + 0.4 * index / max(count - 1, 1)))
        turn = 0
        while len(sample.token_ids) < target:
            size = 33 if turn % 2 == 0 else 66
            ids = torch.randint(10, vocab, (size,), generator=generator).tolist()
            sample.extend(ids, 1 if turn % 2 == 0 else 0, [-1.5] * size if turn % 2 == 0 else None)
            turn += 1
        samples.append(sample)
    return samples


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="f32,bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=4, help="samples in the group (one update)")
    parser.add_argument("--length", type=int, default=1500, help="tokens per sample (mean)")
    parser.add_argument("--prefix", type=int, default=400, help="shared prompt tokens")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    names = args.variants.split(",")
    with tempfile.TemporaryDirectory() as out:
        base = GRPOConfig(model="local", output_dir=out, group_size=args.samples, beta=0.04,
                          micro_batch_size=2, learner_dtype="float32", max_sequence_tokens=4096, seed=0)
        trainer = GRPOTrainer(base, policy=None)
        trainer.freeze_reference()
        vocab = int(trainer.model.config.vocab_size)
        samples = synthetic_samples(args.samples, args.length, args.prefix, vocab, seed=0)
        rewards = [float(i % 3) / 2 for i in range(args.samples)]
        saved = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        print(uptime(), flush=True)
        seconds: dict[str, list[float]] = {n: [] for n in names}
        cpu_seconds: dict[str, list[float]] = {n: [] for n in names}
        forwarded: dict[str, float] = {}
        for round_ in range(args.rounds + 1):  # round 0 warms every variant up and is not counted
            for name in names:
                knobs = dict(VARIANTS[name])
                torch.set_num_threads(knobs.pop("threads", args.threads))
                trainer.config = dataclasses.replace(base, **knobs)
                trainer.model.load_state_dict(saved)
                trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=base.learning_rate)
                episodes = [TokenTrajectory("t", "t", [], [], samples=[s]) for s in samples]
                started, cpu_started = time.perf_counter(), time.process_time()
                stats = trainer._update([Group("t", episodes, 0, rewards=rewards)])
                elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
                forwarded[name] = stats["forwarded_tokens"]
                print(f"round {round_} {name}: {elapsed:.2f} s wall, {cpu:.2f} s CPU, forwarded {stats['forwarded_tokens']:.0f}, "
                      f"padding {stats['padding_tokens']:.0f}, loss {stats['loss']:.6f}, "
                      f"grad_norm {stats['grad_norm']:.6f}", flush=True)
                if round_ > 0:
                    seconds[name].append(elapsed)
                    cpu_seconds[name].append(cpu)
        print(uptime())
        # Under load, CPU seconds (all threads of this process) are steadier than wall seconds.
        print("| variant | median wall s | median CPU s | CPU ms / forwarded token | wall runs | CPU runs |")
        print("|---|---|---|---|---|---|")
        for name in names:
            wall, cpu = statistics.median(seconds[name]), statistics.median(cpu_seconds[name])
            print(f"| {name} | {wall:.2f} | {cpu:.2f} | {1000 * cpu / forwarded[name]:.2f} | "
                  f"{', '.join(f'{s:.1f}' for s in seconds[name])} | "
                  f"{', '.join(f'{s:.1f}' for s in cpu_seconds[name])} |")


if __name__ == "__main__":
    main()
