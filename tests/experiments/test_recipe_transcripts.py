"""experiments/recipe_transcripts.py replays a recipe run's held-out evaluation and refuses one it does not reproduce."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envgym.cli import main

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "recipe_transcripts.py"
TINY = {"name": "tiny", "env": {"seed": 1, "tasks": 150, "heldout": 4},
        "transfer": {"seed": 101, "domains": 1, "tasks": 150, "per_domain": 3},
        "warm_start": {"steps": 1, "batch": 2}, "minutes": 10, "bootstrap": 100,
        "grpo": {"model": "tiny-random", "group_size": 2, "tasks_per_step": 1, "max_steps": 1, "max_turns": 2,
                 "max_new_tokens": 8, "save_every": 1, "learning_rate": 0.05}}


@pytest.mark.slow
def test_the_replay_matches_the_report_and_a_tampered_report_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = tmp_path / "tiny.yaml"
    recipe.write_text(yaml.safe_dump(TINY))
    run = tmp_path / "run"
    assert main(["train", str(recipe), "--set", f"grpo.output_dir={run}"]) == 0
    capsys.readouterr()
    report = json.loads((run / "report.json").read_text())
    for held_out in ("train_domain", report["transfer"][0]["env_id"]):
        done = subprocess.run([sys.executable, str(SCRIPT), str(run), "--set", held_out, "--out", str(tmp_path / "t")],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        accounts = json.loads((tmp_path / "t" / "accounts.json").read_text())
        results = report["per_task"][held_out]
        assert len(accounts) == sum(b != c for b, c in zip(results["b"], results["c"], strict=True))
        assert (tmp_path / "t" / "transcripts.md").read_text().startswith(f"# {run}: {held_out}")
    report["per_task"]["train_domain"]["c"][0] = not report["per_task"]["train_domain"]["c"][0]
    (run / "report.json").write_text(json.dumps(report))
    done = subprocess.run([sys.executable, str(SCRIPT), str(run)], capture_output=True, text=True)
    assert done.returncode != 0 and "(c) does not reproduce the report" in done.stderr
