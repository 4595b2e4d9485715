"""The judge filter (issue 15, part 5): trajectories kept only when they pass the verifiable rubric AND an LLM judge
scores them at or above the threshold; the judge runs through the record/replay cache, so a recorded run replays
with no model at all and keeps the same trajectories."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from envgym.cli import main
from envgym.llm import CachedChatModel, ScriptedChatModel
from synth.pipeline import SynthConfig
from synth.rollouts import passes, rollout
from synth.stages.judge import judge_filter
from synth.stats import collect_stats
from synth.store import read_jsonl


def _scores(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
    """A judge that prefers short trajectories: 0.9 for the shortest of the group, 0.2 for the others."""
    prompt = messages[-1]["content"]
    bodies = re.findall(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', prompt, flags=re.S)
    shortest = min(len(body) for _, body in bodies)
    return json.dumps({"scores": [{"trajectory_id": int(i), "score": 0.9 if len(body) == shortest else 0.2,
                                   "explanation": "scripted"} for i, body in bodies]})


@pytest.fixture(scope="module")
def suite(small_suite: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shared suite: the filter writes its counts into the folder."""
    copy = tmp_path_factory.mktemp("judged") / "suite"
    shutil.copytree(small_suite, copy)
    return copy


@pytest.fixture(scope="module")
def rollouts(suite: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("judge")
    # Two fair runs per task with transient failures (retries make one longer than the other), and a random run
    # (its own file: a rollout file holds one run per task and k).
    rollout(suite, folder / "fair.jsonl", policy="fair", n=2, seed=0, failure_rate=0.3)
    rollout(suite, folder / "random.jsonl", policy="random", n=1, seed=0)
    out = folder / "rollouts.jsonl"
    out.write_text((folder / "fair.jsonl").read_text() + (folder / "random.jsonl").read_text())
    return out


def test_judge_keeps_only_verified_trajectories_it_scores_high_and_replays_offline(
        suite: Path, rollouts: Path, tmp_path: Path) -> None:
    cache = tmp_path / "judge_cache.jsonl"
    recorded = CachedChatModel(ScriptedChatModel(reply_fn=_scores, name="judge"), cache, mode="record")
    summary = judge_filter(suite, rollouts, tmp_path / "kept.jsonl", recorded, threshold=0.5)
    kept = read_jsonl(tmp_path / "kept.jsonl")
    records = read_jsonl(rollouts)
    # Three runs of every task: two fair ones and a random one.
    assert summary["trajectories"] == len(records) == 3 * collect_stats(suite)["tasks"]
    assert summary["judge_kept"] == len(kept)
    assert all(passes(r) and r["judge"] >= 0.5 for r in kept)
    # Some verified trajectories lose to a shorter one of their group: the judge removed them, not the rubric.
    assert 0 < len(kept) < summary["verified"]
    # Replay: the model must not be called (it has no replies), the same trajectories are kept.
    offline = CachedChatModel(ScriptedChatModel(replies=[], name="judge"), cache, mode="replay")
    again = judge_filter(suite, rollouts, tmp_path / "again.jsonl", offline, threshold=0.5)
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "kept.jsonl").read_bytes()
    assert again["judge_kept"] == summary["judge_kept"]
    assert collect_stats(suite)["judge_kept"] == len(kept)


def test_stats_and_the_run_summary_report_tasks_per_source_and_the_judge_counts(
        suite: Path, rollouts: Path, small_config: SynthConfig, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "judge_cache.jsonl"
    judge = CachedChatModel(ScriptedChatModel(reply_fn=_scores, name="judge"), cache, mode="record")
    summary = judge_filter(suite, rollouts, tmp_path / "kept.jsonl", judge, threshold=0.5)
    stats = collect_stats(suite)
    assert stats["tasks_by_source"] == {"procedural": stats["tasks"], "mcp": 0}
    assert stats["judge"] == {"trajectories": 3 * stats["tasks"], "verified": summary["verified"], "kept": summary["judge_kept"],
                              "judge_failed": 0, "threshold": 0.5, "model": "judge"}
    # Resuming the finished run on the judged folder prints the same counts in its summary.
    args = ["synth", "run", "--seed", str(small_config.seed), "--domains", str(small_config.domains),
            "--tasks-per-env", str(small_config.tasks_per_env), "--out", str(suite), "--json"]
    assert main(args) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["tasks_by_source"] == stats["tasks_by_source"] and printed["judge"] == stats["judge"]


def test_a_threshold_outside_0_1_is_refused(suite: Path, rollouts: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="threshold"):
        judge_filter(suite, rollouts, tmp_path / "k.jsonl", ScriptedChatModel(replies=[]), threshold=1.5)
