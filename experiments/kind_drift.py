"""Does one task kind take over a GRPO run? `python experiments/kind_drift.py RUN_DIR... [--md F]`.

Reads each run's `rollouts.jsonl` (every training episode, with its GRPO step) and the kinds of its tasks (each
task's `meta.kind`, from the suite a recipe run synthesized into `RUN/train/suite`), and prints per run and step,
for each kind: episodes, successes, and the episodes that called a tool only other kinds need (a tool no reference
solution of this kind uses but one of another kind does: on the recipe's domain, a lookup that calls the
aggregate's `lowest_liters_of_watering_plans`). Then, from the run's `report.json`, the held-out successes per
kind after the warm start and after GRPO (b → c), on the training domain and on the never-trained domains (their
kinds from `RUN/transfer/suite`). This is the measurement behind "one kind takes over" in
docs/results/train_multiturn.md: a run whose early successes are all of one kind teaches that kind's tool to both.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from envgym.loader import read_environment


def suite_kinds(run: Path) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Each task's kind by id, and each kind's tools (those its reference solutions call), from `run/train/suite`."""
    kinds: dict[str, str] = {}
    tools: dict[str, set[str]] = defaultdict(set)
    for tasks_file in sorted(run.glob("train/suite/*/tasks.jsonl")):
        _, tasks = read_environment(tasks_file.parent)
        for task in tasks:
            kind = str(task.meta.get("kind", "?"))
            kinds[task.id] = kind
            tools[kind].update(call.name for call in task.solution)
    if not kinds:
        raise SystemExit(f"{run}: no train/suite/*/tasks.jsonl (a recipe run's folder is needed: it names the kinds)")
    return kinds, dict(tools)


def foreign_tools(tools: dict[str, set[str]]) -> dict[str, set[str]]:
    """Per kind, the tools only other kinds need."""
    return {kind: set().union(*(t for k, t in tools.items() if k != kind)) - own for kind, own in tools.items()}


def rows(run: Path) -> list[dict[str, Any]]:
    kinds, tools = suite_kinds(run)
    foreign = foreign_tools(tools)
    out = []
    with (run / "rollouts.jsonl").open() as handle:
        for line in handle:
            if not line.strip():
                continue
            episode = json.loads(line)
            kind = kinds.get(episode["task_id"], "?")
            called = {m.get("name") for m in episode["messages"] if m.get("role") == "tool"}
            out.append({"step": episode["step"], "kind": kind, "success": episode["reward"] >= 1.0,
                        "foreign": bool(called & foreign.get(kind, set()))})
    return out


def heldout_by_kind(run: Path) -> dict[str, dict[str, list[int]]]:
    """Per task set ('train domain', 'never-trained') and kind: [successes (b), successes (c), tasks]."""
    report = json.loads((run / "report.json").read_text())
    kinds: dict[str, str] = {}
    for tasks_file in sorted(run.glob("*/suite/*/tasks.jsonl")):
        _, tasks = read_environment(tasks_file.parent)
        kinds.update({task.id: str(task.meta.get("kind", "?")) for task in tasks})
    (train_file,) = sorted(run.glob("train/suite/*/tasks.jsonl"))
    _, train_tasks = read_environment(train_file.parent)
    sets = [("train domain", "train_domain", [t.id for t in train_tasks][-report["recipe"]["env"]["heldout"]:])]
    sets += [("never-trained", t["env_id"], t["tasks"]) for t in report.get("transfer", [])]
    out: dict[str, dict[str, list[int]]] = {}
    for label, key, ids in sets:
        results = report["per_task"][key]
        if "c" not in results:
            continue
        for i, task_id in enumerate(ids):
            cell = out.setdefault(label, {}).setdefault(kinds[task_id], [0, 0, 0])
            cell[0] += results["b"][i]
            cell[1] += results["c"][i]
            cell[2] += 1
    return out


def heldout_table(run: Path) -> str:
    lines = ["| held out | kind | after the warm start (b) → after GRPO (c) |", "|---|---|---|"]
    for label, by_kind in heldout_by_kind(run).items():
        lines += [f"| {label} | {kind} | {b} → {c} of {n} |" for kind, (b, c, n) in sorted(by_kind.items())]
    return "\n".join(lines) + "\n"


def table(run: Path, episodes: list[dict[str, Any]]) -> str:
    kinds = sorted({e["kind"] for e in episodes})
    steps: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        steps[e["step"]].append(e)
    head = " | ".join(f"{k}: successes / episodes (another kind's tool)" for k in kinds)
    lines = [f"### {run}", "", f"| step | {head} |", "|---|" + "---|" * len(kinds)]
    for step in sorted(steps):
        cells = []
        for kind in kinds:
            mine = [e for e in steps[step] if e["kind"] == kind]
            cells.append(f"{sum(e['success'] for e in mine)} / {len(mine)} ({sum(e['foreign'] for e in mine)})"
                         if mine else "-")
        lines.append(f"| {step} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", nargs="+", type=Path, help="recipe output folders (rollouts.jsonl, train/suite)")
    parser.add_argument("--md", type=Path, help="also write the tables here")
    args = parser.parse_args(argv)
    parts = []
    for run in args.runs:
        parts.append(table(run, rows(run)))
        if (run / "report.json").exists():  # held-out results per kind, once the run has them
            parts.append(heldout_table(run))
    text = "\n".join(parts)
    sys.stdout.write(text)
    if args.md is not None:
        args.md.write_text(text)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
