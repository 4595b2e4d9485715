"""The offline pipeline end to end: registrable envs, verified tasks, determinism, resume after a kill."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envgym
from envgym.loader import load_environment
from envgym.registry import env_dirs
from synth.pipeline import SynthConfig, run_pipeline
from synth.stages.verify import CONTROLS, verify_tasks
from synth.stats import collect_stats


def file_hashes(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_each_generated_env_registers_and_passes_check_env(small_suite: Path) -> None:
    ids = envgym.register_dir(small_suite)
    assert len(ids) == 3
    for eid in ids:
        env = gym.make(eid)
        check_env(env.unwrapped, skip_render_check=True)
        env.close()


def test_every_kept_task_passes_oracle_fair_planner_and_fails_every_control(small_suite: Path) -> None:
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder.resolve()))
        assert data.tasks
        for task_id, scores in verify_tasks(data).items():
            assert scores["oracle"] == 1.0 and scores["fair"] == 1.0, (task_id, scores)
            assert all(scores[c] == 0.0 for c in CONTROLS if c in scores), (task_id, scores)
            writes = any(not data.executor.tools[c.name].read_only for c in data.task(task_id).solution)
            assert ("skip-confirm" in scores) == writes


def test_domains_span_categories_and_worlds_have_two_to_six_entities(small_suite: Path) -> None:
    stats = collect_stats(small_suite)
    assert stats["categories"] == 3 and stats["environments"] == 3
    for folder in env_dirs(small_suite):
        world = load_environment(str(folder.resolve())).world
        # The domain's own tables (seeded records); the mechanisms' tables (ledgers, audit rows) start empty.
        assert 2 <= sum(e.count > 0 for e in world.entities.values()) <= 6
        assert sum(not t.read_only for t in world.tools) >= 2
        assert all(t.parameters["additionalProperties"] is False for t in world.tools)
        assert world.rules is not None and world.rules.authenticate_with


def test_stage_files_are_content_addressed(small_suite: Path) -> None:
    for stage in ("domains", "tools", "tasks"):
        lines = (small_suite / "_synth" / f"{stage}.jsonl").read_text().splitlines()
        ids = [json.loads(line)["id"] for line in lines]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_every_kept_tool_passed_its_execution_checks(small_suite: Path) -> None:
    records = [json.loads(x) for x in (small_suite / "_synth" / "tools.jsonl").read_text().splitlines()]
    assert len(records) >= 3 * 8
    for r in records:
        assert r["valid"] == all(r["checks"].values())
        assert r["checks"].get("valid_call_succeeds") is r["valid"] or not r["valid"]
    writes = [r for r in records if "write_scope" in r["checks"]]
    assert len(writes) >= 3 * 2 and all(r["checks"]["write_scope"] for r in writes if r["valid"])


def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(small_suite: Path, small_config: SynthConfig,
                                                                      tmp_path: Path) -> None:
    run_pipeline(small_config, tmp_path / "again")
    assert file_hashes(tmp_path / "again") == file_hashes(small_suite)
    run_pipeline(small_config.model_copy(update={"seed": 4}), tmp_path / "other")
    assert file_hashes(tmp_path / "other") != file_hashes(small_suite)


def test_two_workers_write_the_same_files_as_one(small_suite: Path, small_config: SynthConfig, tmp_path: Path) -> None:
    run_pipeline(small_config, tmp_path / "two", workers=2)
    assert file_hashes(tmp_path / "two") == file_hashes(small_suite)


def test_a_run_killed_mid_way_resumes_to_the_same_files(small_suite: Path, small_config: SynthConfig,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "envgym.cli", "synth", "run", "--domains", "3", "--seed", "3",
            "--tasks-per-env", "10", "--out", str(out), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parents[2],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    deadline = time.monotonic() + 120
    partial = out / "_synth" / "tasks.partial.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.exists() and '"end":true' in partial.read_text():
            break
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "_synth" / "summary.json").exists()
    run_pipeline(small_config, out)
    assert file_hashes(out) == file_hashes(small_suite)


def test_resume_refuses_a_folder_made_with_other_settings(small_suite: Path) -> None:
    try:
        run_pipeline(SynthConfig(seed=99, domains=3), small_suite)
    except ValueError as exc:
        assert "config.json" in str(exc)
    else:
        raise AssertionError("a run with other settings resumed into the folder")


def test_the_cli_names_a_folder_made_with_other_settings_in_one_line(
    small_suite: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from envgym.cli import main

    assert main(["synth", "run", "--domains", "3", "--seed", "99", "--out", str(small_suite)]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "other settings" in err and "Traceback" not in err
