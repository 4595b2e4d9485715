"""How a GRPO run's training episodes change step by step: `python experiments/episode_drift.py RUN_DIR... [--md F]`.

Reads each run's `rollouts.jsonl` (every training episode the trainer wrote, with its GRPO step) and prints per
step: episodes, successes, questions to the user per episode (assistant messages that call no tool and end with a
question mark), episodes that ended in an answer (the last assistant message calls no tool and asks nothing),
episodes whose final reply reported an answer (a value of each asked type that a tool returned, right or wrong:
`envgym.rewards.answers.reported_result`, what `grpo.credit_requires_answer` gates the call credit on; read from the
episode's `answer_reported`, or computed from the runs' `train/suite` for runs older than that field), truncated
episodes, and the mean training reward of wrong answers and of episodes with no answer. With several runs the steps
are pooled across them. This is the measurement behind "the policy drifts to asking" in
docs/results/train_multiturn.md.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any


def is_call(message: dict[str, Any]) -> bool:
    return bool(message.get("tool_calls")) or "<tool_call>" in (message.get("content") or "")


def suite_answers(run: Path) -> dict[str, Any]:
    """Each task's answers by id, from the suite a recipe run synthesized into `run/train/suite` ({} if none)."""
    from envgym.loader import read_environment

    answers: dict[str, Any] = {}
    for tasks_file in sorted(run.glob("train/suite/*/tasks.jsonl")):
        _, tasks = read_environment(tasks_file.parent)
        answers.update({task.id: task.answers for task in tasks})
    return answers


def reported(episode: dict[str, Any], answers: dict[str, Any]) -> bool | None:
    if "answer_reported" in episode:
        return episode["answer_reported"]
    from envgym.rewards.answers import reported_result

    asked = answers.get(episode["task_id"])
    return reported_result(asked, episode["messages"]) if asked else None


def describe(episode: dict[str, Any], answers: dict[str, Any] | None = None) -> dict[str, Any]:
    said = [m for m in episode["messages"] if m["role"] == "assistant"]
    questions = sum(1 for m in said if not is_call(m) and (m.get("content") or "").rstrip().endswith("?"))
    last = said[-1] if said else {}
    answered = bool(said) and not is_call(last) and not (last.get("content") or "").rstrip().endswith("?")
    return {"step": episode["step"], "questions": questions, "answered": answered,
            "reported": reported(episode, answers or {}),
            "success": episode["reward"] >= 1.0, "truncated": bool(episode["truncated"]),
            "training_reward": episode["training_reward"]}


def reports(group: list[dict[str, Any]]) -> str:
    known = [r["reported"] for r in group if r["reported"] is not None]
    return str(sum(known)) if known else "-"


def table(rows: list[dict[str, Any]]) -> str:
    by_step: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_step[row["step"]].append(row)
    lines = ["| step | episodes | successes | questions / episode | ended in an answer | reported an answer |"
             " truncated | training reward: wrong answer / no answer |", "|---|---|---|---|---|---|---|---|"]
    for step in sorted(by_step):
        group = by_step[step]
        wrong = [r["training_reward"] for r in group if r["answered"] and not r["success"]]
        silent = [r["training_reward"] for r in group if not r["answered"]]
        lines.append(f"| {step} | {len(group)} | {sum(r['success'] for r in group)} | "
                     f"{mean(r['questions'] for r in group):.1f} | {sum(r['answered'] for r in group)} | "
                     f"{reports(group)} | {sum(r['truncated'] for r in group)} | "
                     f"{(f'{mean(wrong):.3f}' if wrong else '-')} / {(f'{mean(silent):.3f}' if silent else '-')} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="recipe or trainer output folders (rollouts.jsonl)")
    parser.add_argument("--md", type=Path, help="also write the table here")
    args = parser.parse_args(argv)
    rows = []
    answers: dict[str, Any] = {}  # one recipe's runs share a suite: a run that kept none reads another's
    for run in args.runs:
        answers.update(suite_answers(run))
    for run in args.runs:
        with (run / "rollouts.jsonl").open() as handle:
            rows += [describe(json.loads(line), answers) for line in handle if line.strip()]
    text = table(rows)
    print(text, end="")
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
