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
from gymnasium.utils.env_checker import check_env

import envgym
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.registry import env_dirs
from synth.pipeline import SynthConfig, run_pipeline
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


def test_oracle_scores_one_and_doing_nothing_fails_on_every_task(small_suite: Path) -> None:
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder.resolve()))
        assert data.tasks
        env = envgym.ToolWorldEnv(env_dir=folder)
        for task in data.tasks:
            assert run_episode(env, OraclePolicy(data), options={"task_id": task.id}).reward == 1.0, task.id
            assert run_episode(env, RefusePolicy(), options={"task_id": task.id}).reward < 1.0, task.id


def test_domains_span_categories_and_tools_are_typed_with_writes(small_suite: Path) -> None:
    stats = collect_stats(small_suite)
    assert stats["categories"] == 3 and stats["domains"] == 3
    for folder in env_dirs(small_suite):
        world = load_environment(str(folder.resolve())).world
        assert 5 <= len(world.tools) <= 8
        assert sum(not t.read_only for t in world.tools) >= 2
        assert all(t.parameters["additionalProperties"] is False for t in world.tools)


def test_stage_files_are_content_addressed(small_suite: Path) -> None:
    for stage in ("domains", "tools", "agents", "tasks"):
        lines = (small_suite / "_synth" / f"{stage}.jsonl").read_text().splitlines()
        ids = [json.loads(line)["id"] for line in lines]
        assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_rejected_tools_are_reported_and_all_builtin_tools_validate(small_suite: Path) -> None:
    records = [json.loads(x) for x in (small_suite / "_synth" / "tools.jsonl").read_text().splitlines()]
    assert len(records) >= 3 * 6
    assert all(r["valid"] and r["checks"]["valid_call_succeeds"] for r in records)
    writes = [r for r in records if "write_scope" in r["checks"]]
    assert len(writes) >= 3 * 2


def test_same_seed_gives_byte_identical_files_and_another_seed_does_not(small_suite: Path, small_config: SynthConfig, tmp_path: Path) -> None:
    run_pipeline(small_config, tmp_path / "again", progress=False)
    assert file_hashes(tmp_path / "again") == file_hashes(small_suite)
    run_pipeline(small_config.model_copy(update={"seed": 4}), tmp_path / "other", progress=False)
    assert file_hashes(tmp_path / "other") != file_hashes(small_suite)


def test_a_run_killed_mid_way_resumes_to_the_same_files(small_suite: Path, small_config: SynthConfig,
                                                        tmp_path: Path) -> None:
    out = tmp_path / "killed"
    argv = [sys.executable, "-m", "envgym.cli", "synth", "run", "--domains", "3", "--seed", "3",
            "--tasks-per-env", "10", "--out", str(out), "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=Path(__file__).parents[2],
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    deadline = time.monotonic() + 60
    partial = out / "_synth" / "tasks.partial.jsonl"
    while time.monotonic() < deadline and not partial.exists() and proc.poll() is None:
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    assert not (out / "_synth" / "summary.json").exists()
    run_pipeline(small_config, out, progress=False)
    assert file_hashes(out) == file_hashes(small_suite)


def test_resume_refuses_a_folder_made_with_other_settings(small_suite: Path) -> None:
    try:
        run_pipeline(SynthConfig(seed=99, domains=3), small_suite, progress=False)
    except ValueError as exc:
        assert "config.json" in str(exc)
    else:
        raise AssertionError("a run with other settings resumed into the folder")
