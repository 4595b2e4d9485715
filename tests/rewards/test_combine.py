"""Combining the verifiable reward with a judge score."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envgym.env import ToolWorldEnv
from envgym.llm.scripted import ScriptedChatModel
from envgym.play.episode import Trajectory
from envgym.play.eval import evaluate
from envgym.play.policies import OraclePolicy
from envgym.registry import find_env_dir
from envgym.rewards.combine import COMBINE_MODES, JudgedReward, build_reward_source, combine_rewards
from envgym.rewards.judge import RelativeJudge

unit = st.floats(min_value=0.0, max_value=1.0)


def test_single_source_modes() -> None:
    assert combine_rewards(1.0, 0.3, "verifiable") == 1.0
    assert combine_rewards(1.0, 0.3, "judge") == 0.3


def test_weighted_mode_is_a_convex_mix() -> None:
    assert combine_rewards(1.0, 0.0, "weighted") == 0.5
    assert combine_rewards(1.0, 0.5, "weighted", judge_weight=0.2) == pytest.approx(0.9)


def test_gate_is_the_default_and_uses_the_documented_floor() -> None:
    assert combine_rewards(1.0, 0.0) == 0.5
    assert combine_rewards(1.0, 1.0) == 1.0
    assert combine_rewards(0.0, 1.0) == 0.0
    assert combine_rewards(0.8, 1.0, gate_threshold=0.8, gate_floor=0.2) == pytest.approx(1.0)


@given(pass_v=unit, fail_v=unit, judge_pass=unit, judge_fail=unit)
def test_gate_ranks_every_pass_above_every_fail(
    pass_v: float, fail_v: float, judge_pass: float, judge_fail: float
) -> None:
    threshold = 0.5
    passed = combine_rewards(max(pass_v, threshold), judge_pass, "gate", gate_threshold=threshold)
    failed = combine_rewards(min(fail_v, 0.49), judge_fail, "gate", gate_threshold=threshold)
    assert passed > failed


@pytest.mark.parametrize("mode", COMBINE_MODES)
def test_a_missing_judge_score_falls_back_to_the_verifiable_reward(mode: str) -> None:
    assert combine_rewards(0.7, None, mode) == 0.7  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "verifiable, judge, kwargs, match",
    [
        (1.2, 0.5, {}, "verifiable reward"),
        (1.0, math.nan, {}, "judge reward"),
        (1.0, 0.5, {"mode": "sum"}, "mode must be one of"),
        (1.0, 0.5, {"judge_weight": 2.0}, "judge_weight"),
        (1.0, 0.5, {"gate_floor": 1.0}, "gate_floor"),
    ],
)
def test_invalid_inputs_name_what_was_expected(
    verifiable: float, judge: float, kwargs: dict, match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        combine_rewards(verifiable, judge, **kwargs)


def _scores(*values: float) -> str:
    return json.dumps({"scores": [{"trajectory_id": i + 1, "explanation": "ok", "score": v}
                                  for i, v in enumerate(values)]})


def test_a_judged_group_gets_combine_rewards_of_each_episode(retail_trajectories: list[Trajectory]) -> None:
    judge = RelativeJudge(ScriptedChatModel([_scores(0.9, 0.2, 0.1, 0.0)]))
    source = JudgedReward(judge, "weighted", judge_weight=0.5, validate=False)  # the arithmetic, not the check
    verifiable = [t.reward for t in retail_trajectories]
    expected = [combine_rewards(v, j, "weighted") for v, j in zip(verifiable, [0.9, 0.2, 0.1, 0.0], strict=True)]
    assert source.score(retail_trajectories) == pytest.approx(expected)


@pytest.mark.parametrize("mode", ["judge", "weighted", "gate"])
def test_a_failed_judge_keeps_the_verifiable_rewards_in_every_mode(
    retail_trajectories: list[Trajectory], mode: str
) -> None:
    judge = RelativeJudge(ScriptedChatModel(["no scores here", "still none"]))
    source = JudgedReward(judge, mode, validate=False)  # type: ignore[arg-type]
    assert source.score(retail_trajectories) == [t.reward for t in retail_trajectories]
    assert source.failures == 1


def test_eval_scores_episodes_with_the_same_source_as_training() -> None:
    env = ToolWorldEnv(find_env_dir("retail"))
    judge = RelativeJudge(ScriptedChatModel(["not json"] * 4))
    report = evaluate(env, lambda e: OraclePolicy(e.data), "oracle", runs=2, tasks=[env.data.tasks[0].id],
                      reward_source=JudgedReward(judge, "weighted", name="env+judge", validate=False))
    summary = report.summary()
    # Two oracle runs are identical trajectories: the judge is not asked, the verifiable reward stands.
    assert summary["reward_source"] == "env+judge" and summary["reward_mean"] == 1.0
    assert build_reward_source("env").name == "env"
