"""What changed on the tasks a recipe run gained or lost: its held-out episodes before and after GRPO, side by side.

    python experiments/recipe_transcripts.py runs/mt_neg0_s1 [--set train_domain] [--out DIR]

Plays one held-out set of an `envgym train RECIPE.yaml` run (`train_domain`, or a never-trained domain's env id)
exactly as the recipe's evaluation did (`envgym.train.recipe.evaluate_tasks`: greedy, float32, the same envs, limits
and episode seeds) with the warm-started weights (the run's `warm_start.pt`, or that of the run it took its warm
start from) and with its last checkpoint, and first checks that the successes equal the report's (b) and (c) task
for task: a transcript that does not reproduce the run's evaluation explains nothing. Then, for every task gained
or lost, writes both episodes (every message, tool calls and results included) to `--out`/transcripts.md, and a
one-line account per task to the terminal: turns, questions to the user, the tools that answered, and the last
assistant message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envgym.registry import register_dir  # noqa: E402
from envgym.train.config import GRPOConfig  # noqa: E402
from envgym.train.generation import float32  # noqa: E402
from envgym.train.policy import load_policy  # noqa: E402
from envgym.train.recipe import WARM_WEIGHTS  # noqa: E402
from envgym.train.rollout import run_group  # noqa: E402
from envgym.train.trainer import GRPOTrainer, make_env  # noqa: E402


def warm_weights(run: Path, report: dict[str, Any]) -> Path:
    """The run's warm-started weights: its own, or those of the folder it took its warm start from."""
    for folder in (run, Path(report.get("warm_start", {}).get("from") or run)):
        if (folder / WARM_WEIGHTS).is_file():
            return folder / WARM_WEIGHTS
    raise SystemExit(f"{run}: no {WARM_WEIGHTS} here or in the folder its warm start came from")


def account(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Turns, questions to the user, tool calls by name and the final assistant message of one episode."""
    said = [m for m in messages if m.get("role") == "assistant"]
    calls = [m["name"] for m in messages if m.get("role") == "tool" and m.get("name")]
    questions = sum(1 for m in said if "<tool_call>" not in (m.get("content") or "")
                    and (m.get("content") or "").rstrip().endswith("?"))
    last = (said[-1].get("content") or "").strip() if said else ""
    return {"turns": len(said), "questions": questions, "calls": calls, "last": last}


def render(messages: list[dict[str, Any]]) -> str:
    lines = []
    for m in messages:
        if m.get("role") == "system":
            continue
        text = (m.get("content") or "").strip().replace("\n", " ")
        lines.append(f"- **{m.get('role')}**: {text[:400]}")
    return "\n".join(lines)


def play(trainer: GRPOTrainer, envs: list[Any], tasks: list[str], seed: int) -> list[Any]:
    """The recipe's evaluate_tasks, keeping the episodes."""
    episodes: list[Any] = []
    with float32(trainer.sampler):
        for start in range(0, len(tasks), len(envs)):
            chunk = tasks[start : start + len(envs)]
            episodes += run_group(envs[: len(chunk)], chunk, trainer.sampler, trainer.limits, temperature=0.0,
                                  seed=seed + start)
    return episodes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="the output folder of an `envgym train RECIPE.yaml` run")
    parser.add_argument("--set", default="train_domain", help="train_domain or a never-trained domain's env id")
    parser.add_argument("--out", help="where to write transcripts.md and accounts.json (default: RUN/transcripts)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    console = Console(stderr=True)
    run = Path(args.run)
    report = json.loads((run / "report.json").read_text())
    recipe = report["recipe"]
    register_dir(run / "train" / "suite", override=True)
    if (run / "transfer" / "suite").is_dir():
        register_dir(run / "transfer" / "suite", override=True)
    if args.set not in report["per_task"]:
        raise SystemExit(f"--set {args.set!r}: the report has {sorted(report['per_task'])}")
    config = GRPOConfig.from_dict({**recipe["grpo"], "env_id": report["env_id"], "output_dir": str(run / "tmp"),
                                   "heldout_tasks": recipe["env"]["heldout"], "max_steps": 1, "save_every": 0},
                                  source=f"{run}/report.json")
    trainer = GRPOTrainer(config, policy=load_policy(config.model, recipe["warm_start"]["seed"]), console=console)
    if args.set == "train_domain":
        envs, tasks = trainer.envs, list(trainer.heldout_tasks)
    else:
        (entry,) = [t for t in report["transfer"] if t["env_id"] == args.set]
        envs, tasks = [make_env(args.set) for _ in trainer.envs], list(entry["tasks"])
    (checkpoint,) = sorted(run.glob("checkpoint-*"))[-1:]
    played: dict[str, list[Any]] = {}
    for label, weights in (("b", warm_weights(run, report)), ("c", checkpoint / "model.pt")):
        trainer.model.load_state_dict(torch.load(weights, weights_only=True))
        console.print(f"({label}) {weights}: playing {len(tasks)} tasks")
        played[label] = play(trainer, envs, tasks, recipe["eval_seed"])
        got = [e.reward >= 1.0 for e in played[label]]
        if got != report["per_task"][args.set][label]:
            raise SystemExit(f"({label}) does not reproduce the report: {sum(got)} successes against "
                             f"{sum(report['per_task'][args.set][label])}, tasks differ")
    out = Path(args.out or run / "transcripts")
    out.mkdir(parents=True, exist_ok=True)
    sections, accounts = [f"# {run}: {args.set}, tasks gained or lost by GRPO\n"], {}
    for task, before, after in zip(tasks, played["b"], played["c"], strict=True):
        b_ok, c_ok = before.reward >= 1.0, after.reward >= 1.0
        if b_ok == c_ok:
            continue
        change = "gained" if c_ok else "lost"
        accounts[task] = {"change": change, "b": account(before.messages), "c": account(after.messages)}
        for label in ("b", "c"):
            a = accounts[task][label]
            console.print(f"{task} {change} ({label}): {a['turns']} turns, {a['questions']} questions, calls "
                          f"{a['calls']}; last: {a['last'][:120]!r}")
        sections.append(f"## {task} ({change})\n\n### after the warm start (b), reward {before.reward:.2f}\n\n"
                        f"{render(before.messages)}\n\n### after GRPO (c), reward {after.reward:.2f}\n\n"
                        f"{render(after.messages)}\n")
    (out / "transcripts.md").write_text("\n".join(sections))
    (out / "accounts.json").write_text(json.dumps(accounts, indent=1) + "\n")
    console.print(f"{len(accounts)} tasks changed; transcripts in {out / 'transcripts.md'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
