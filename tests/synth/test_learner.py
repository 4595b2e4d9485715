"""Difficulty from a learner (issue 15, part 6): per-task success with a Wilson interval, and a curriculum that
keeps every task marked (near 50%, too easy, too hard) and adds append-only hardened versions of the easy ones.
Policies here are scripted (oracle, refuse): the real local model runs in docs/results/, not in the suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.registry import env_dirs
from envgym.world.files import load_tasks
from synth.learner import estimate_success, learner_curriculum, wilson_interval
from synth.rollouts import rollout
from synth.store import read_jsonl


def test_wilson_interval_matches_the_formula_at_the_edges_and_in_the_middle() -> None:
    assert wilson_interval(2, 4) == pytest.approx((0.1500, 0.8500), abs=1e-4)
    assert wilson_interval(0, 4) == pytest.approx((0.0, 0.4899), abs=1e-4)
    assert wilson_interval(4, 4) == pytest.approx((0.5101, 1.0), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    with pytest.raises(ValueError, match="successes"):
        wilson_interval(5, 4)


@pytest.fixture(scope="module")
def mixed(small_suite: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    """Real oracle and refuse rollouts, two per task, mixed so that tasks fall in all three bands: every third task
    is always solved, every third never, the rest half the time."""
    folder = tmp_path_factory.mktemp("learner")
    good = rollout(small_suite, folder / "oracle.jsonl", policy="oracle", n=2, seed=0, max_tasks=12)
    bad = rollout(small_suite, folder / "refuse.jsonl", policy="refuse", n=2, seed=0, max_tasks=12)
    order = sorted({(r["env"], r["task_id"]) for r in good})
    plan = {key: i % 3 for i, key in enumerate(order)}
    records = [r for r in good if r["k"] < 2 - plan[(r["env"], r["task_id"])]] + \
              [r for r in bad if r["k"] >= 2 - plan[(r["env"], r["task_id"])]]
    out = folder / "curriculum"
    learner_curriculum(small_suite, records, out, policy="scripted-mix", band=0.25, seed=0)
    return records, out


def test_success_is_estimated_per_task_from_every_sample(mixed: tuple[list[dict[str, Any]], Path]) -> None:
    records, _ = mixed
    estimates = estimate_success(records)
    assert {e.samples for e in estimates.values()} == {2}
    assert sorted({e.successes for e in estimates.values()}) == [0, 1, 2]
    assert all(e.interval[0] <= e.rate <= e.interval[1] for e in estimates.values())


def test_the_curriculum_keeps_and_marks_every_task_and_hardens_the_easy_ones(
        small_suite: Path, mixed: tuple[list[dict[str, Any]], Path]) -> None:
    records, out = mixed
    rows = read_jsonl(out / "_synth" / "difficulty.jsonl")
    measured = {(r["env"], r["task_id"]) for r in records}
    assert {(r["env"], r["task_id"]) for r in rows} == measured
    kept = {(f.name, t.id): t for f in env_dirs(out) for t in load_tasks(f / "tasks.jsonl")}
    marks = {key: t.meta["curriculum"]["band"] for key, t in kept.items()}
    assert measured <= set(kept), "a task outside the band was dropped"
    assert {marks[k] for k in measured} == {"in_band", "too_easy", "too_hard"}
    for row in rows:
        assert marks[(row["env"], row["task_id"])] == row["band"]
        assert row["band"] == {0: "too_hard", 1: "in_band", 2: "too_easy"}[row["successes"]]
    hardened = [t for t in kept.values() if t.meta["curriculum"]["band"] == "hardened"]
    assert hardened and all(kept[(env, t.meta["parent"])].meta["curriculum"]["band"] == "too_easy"
                            for (env, _), t in kept.items() if t in hardened)


def test_every_hardened_task_keeps_its_parents_rubric_and_writes_and_its_oracle_scores_one(
        small_suite: Path, mixed: tuple[list[dict[str, Any]], Path]) -> None:
    _, out = mixed
    checked = 0
    for folder in env_dirs(out):
        data = load_environment(str(folder.resolve()))
        source = load_environment(str((small_suite / folder.name).resolve()))
        env = ToolWorldEnv(data=data, guard=False)
        for task in data.tasks:
            if task.meta["curriculum"]["band"] != "hardened":
                continue
            parent = source.task(task.meta["parent"])
            assert task.rubric[:len(parent.rubric)] == parent.rubric and len(task.rubric) > len(parent.rubric)
            assert task.instruction.startswith(parent.instruction)
            # A consistent target: the new solution replays, and every change the parent's solution makes is
            # made the same way by it (the constraint only adds).
            target = data.target_state(task)
            assert target.hash() == data.target_state(task).hash()
            made = data.initial.diff(target)
            assert all(change in made for change in data.initial.diff(source.target_state(parent)))
            assert run_episode(env, OraclePolicy(data), seed=0, options={"task_id": task.id}).reward == 1.0
            checked += 1
        env.close()
    assert checked > 0


def test_difficulty_cli_rolls_a_policy_out_and_writes_estimates_curriculum_and_time(
        small_suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cur"
    assert main(["synth", "difficulty", str(small_suite), "--policy", "oracle", "--samples", "2", "--max-tasks", "4",
                 "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tasks"] == 4 and summary["rollouts"] == 8 and summary["too_easy"] == 4
    assert summary["rollout_s"] >= 0 and summary["curriculum_s"] >= 0
    assert json.loads((out / "_synth" / "curriculum.json").read_text())["rollouts"] == 8
    assert (out / "_synth" / "curriculum.md").read_text().count("| 2 / 2 | 1.0 |") == 4
    rows = read_jsonl(out / "_synth" / "difficulty.jsonl")
    assert len(rows) == 4 and all(r["success"] == 1.0 and r["wilson_low"] > 0.3 for r in rows)


def test_difficulty_cli_without_rollouts_or_policy_names_both(
        small_suite: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["synth", "difficulty", str(small_suite), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "--rollouts" in err and "--policy" in err
