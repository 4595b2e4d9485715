"""The envgym command: list, show, run --json, generate."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.cli import main


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_list_shows_the_bundled_suite(capsys: pytest.CaptureFixture[str]) -> None:
    ids = {e["id"] for e in run_json(capsys, "list", "--json")["environments"]}
    assert {"envgym/retail-v0", "envgym/travel-v0", "envgym/calculator-v0"} <= ids


def test_show_describes_tools_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    shown = run_json(capsys, "show", "retail", "--json")
    assert len(shown["tools"]) >= 8 and "Authenticate" in shown["policy"]
    assert shown["entities"]["orders"] == 80


def test_run_oracle_writes_trajectories(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "traj.jsonl"
    summary = run_json(capsys, "run", "travel", "--policy", "oracle", "--episodes", "3", "--out", str(out), "--json")
    assert summary["episodes"] == 3 and summary["mean_reward"] == 1.0 and summary["success_rate"] == 1.0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 and all(t["reward"] == 1.0 and t["messages"] for t in lines)


def test_run_random_policy_scores_below_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    summary = run_json(capsys, "run", "retail", "--policy", "random", "--episodes", "4", "--json")
    assert summary["episodes"] == 4 and summary["mean_reward"] < 1.0


def test_console_script_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "envgym.cli", "run", "calculator", "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["success_rate"] == 1.0


def test_unknown_environment_is_a_clear_error() -> None:
    with pytest.raises(KeyError, match="unknown environment 'nope'"):
        main(["show", "nope"])
