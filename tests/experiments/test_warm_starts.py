"""experiments/warm_starts.py on the warm starts of docs/results: (b) against (b), task by task."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "warm_starts.py"
RESULTS = ROOT / "docs" / "results"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)


def test_warm_starts_pair_each_run_with_the_baseline_task_by_task() -> None:
    folders = [RESULTS / name for name in ("train_multiturn_gate_s1", "train_multiturn_single16",
                                           "train_multiturn_broad_s1")]
    done = run(*map(str, folders), "--resamples", "200")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    broad = next(line for line in lines if line.startswith("| train_multiturn_broad_s1 |") and "[" in line)
    base = json.loads((folders[0] / "report.json").read_text())["per_task"]["never_trained_domains"]["b"]
    after = json.loads((folders[2] / "report.json").read_text())["per_task"]["never_trained_domains"]["b"]
    gained = sum(a and not b for b, a in zip(base, after, strict=True))
    assert gained == sum(after) > 0 and f"{gained} / 0" in broad.split("|")[3]
    assert "16 steps, 88 demonstrations of 7 domains" in done.stdout


def test_runs_on_other_held_out_tasks_are_refused(tmp_path: Path) -> None:
    report = json.loads((RESULTS / "train_multiturn_single16" / "report.json").read_text())
    report["recipe"]["transfer"]["seed"] = 102
    (tmp_path / "report.json").write_text(json.dumps(report))
    done = run(str(RESULTS / "train_multiturn_gate_s1"), str(tmp_path))
    assert done.returncode != 0 and "differs in: transfer" in done.stderr
