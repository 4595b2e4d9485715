"""`envgym train` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.cli import main

pytestmark = pytest.mark.slow


def test_train_command_runs_a_yaml_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "grpo.yaml"
    config.write_text(
        f"model: tiny-random\noutput_dir: {tmp_path / 'run'}\ngroup_size: 2\ntasks_per_step: 1\n"
        "max_new_tokens: 8\nmax_sequence_tokens: 600\nmax_turns: 1\nmax_steps: 1\nheldout_tasks: 2\n"
    )
    assert main(["train", str(config), "--set", "seed=5", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 1 and summary["last"]["step"] == 0
    assert (tmp_path / "run" / "metrics.jsonl").exists()
