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
    assert main(["train", str(config), "--set", "seed=5", "--set", "sampler=pcl", "--set", "pcl_candidates=2",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 1 and summary["last"]["step"] == 0
    assert summary["last"]["pcl_explored"] == 1.0  # the PCL curriculum chose the step's task
    assert (tmp_path / "run" / "metrics.jsonl").exists()
    assert (tmp_path / "run" / "checkpoint-000001" / "curriculum.pt").exists()


def test_unknown_sampler_is_an_error_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--set", "sampler=curriculum"]) == 2
    assert "sampler" in capsys.readouterr().err
