"""Compare warm starts: `python experiments/warm_starts.py BASELINE OTHER... [--out FILE]`.

Each argument is the output folder of an `envgym train RECIPE.yaml` run (its report.json; a run stopped after its
evaluation (b) will do). The runs must have evaluated the same held-out tasks with the same episode seeds (same
`env`, `transfer` and `eval_seed`); their warm starts may differ in anything (steps, domains, learning rate). Prints,
per task set, each run's successes after its warm start, and each OTHER's (b) against BASELINE's (b), paired task by
task (gained, lost, bootstrap interval over tasks, exact sign test: `envgym.train.recipe.paired`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from envgym.train.recipe import paired

NAMES = {"train_domain": "train domain, held-out users", "never_trained_domains": "never-trained domains",
         "all": "all held-out tasks"}


def describe(report: dict[str, Any]) -> str:
    w = report["recipe"].get("warm_start") or {}
    domains = report.get("warm_start", {}).get("domains") or [report["suite"]["source"]]
    return (f"{w.get('steps', 0)} steps, {report.get('warm_start', {}).get('demonstrations', 0)} demonstrations "
            f"of {len(domains)} domain{'s' if len(domains) > 1 else ''}")


def compare(folders: list[Path], resamples: int = 2000) -> str:
    reports = [json.loads((folder / "report.json").read_text()) for folder in folders]
    base = reports[0]
    for folder, report in zip(folders[1:], reports[1:], strict=True):
        for part in ("env", "transfer", "eval_seed"):
            if report["recipe"].get(part) != base["recipe"].get(part):
                raise SystemExit(f"{folder}: its held-out tasks are not {folders[0]}'s (differs in: {part})")
    for folder, report in zip(folders, reports, strict=True):
        if "b" not in report.get("evaluations", {}):
            raise SystemExit(f"{folder}: no evaluation after the warm start")
    keys = [k for k in base["per_task"] if k in NAMES]
    lines = ["| run | warm start | " + " | ".join(NAMES[k] for k in keys) + " |", "|---" * (len(keys) + 2) + "|"]
    for folder, report in zip(folders, reports, strict=True):
        cells = [f"{sum(report['per_task'][k]['b'])}/{len(report['per_task'][k]['b'])}" for k in keys]
        lines.append(f"| {folder.name} | {describe(report)} | " + " | ".join(cells) + " |")
    lines += ["", f"Against {folders[0].name}, task by task:", "",
              "| run | " + " | ".join(NAMES[k] for k in keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for folder, report in zip(folders[1:], reports[1:], strict=True):
        cells = []
        for key in keys:
            p = paired(base["per_task"][key]["b"], report["per_task"][key]["b"], resamples)
            low, high = p["bootstrap95_points"]
            cells.append(f"{p['change_points']:+.1f} [{low:+.1f}, {high:+.1f}], {p['gained']} / {p['lost']}, "
                         f"p {p['sign_test_p']}")
        lines.append(f"| {folder.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\nCells of the second table: change in points, 95% bootstrap over tasks, tasks " \
        "gained / lost, exact sign test.\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="the baseline run's folder, then the others'")
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--out", type=Path, help="also write the tables to this Markdown file")
    args = parser.parse_args(argv)
    if len(args.folders) < 2:
        parser.error("give a baseline and at least one other run")
    table = compare(args.folders, args.resamples)
    sys.stdout.write(table)
    if args.out:
        args.out.write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
