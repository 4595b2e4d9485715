"""The pairwise examiner with scripted judge models."""

from __future__ import annotations

import json
import re
from typing import Any

from envgym.llm.scripted import ScriptedChatModel
from envgym.rewards.examiner import PairwiseExaminer
from envgym.rewards.judge import RelativeJudge

Messages = list[dict[str, Any]]


def quality_judge(messages: Messages, tools: Messages | None) -> str:
    """Scores a trajectory 1.0 when it places an order, else 0.1, wherever it sits in the group."""
    blocks = re.findall(r'<trajectory id="(\d+)">(.*?)</trajectory>', messages[-1]["content"], re.DOTALL)
    scores = [
        {"trajectory_id": int(i), "explanation": "", "score": 1.0 if "place_order" in b else 0.1}
        for i, b in blocks
    ]
    return json.dumps({"scores": scores})


def first_wins_judge(messages: Messages, tools: Messages | None) -> str:
    """A position-biased judge: always prefers trajectory 1."""
    return json.dumps({"scores": [{"trajectory_id": 1, "score": 0.9}, {"trajectory_id": 2, "score": 0.1}]})


def test_rollouts_that_differ_on_the_rubric_are_distinguishable(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    oracle, refuse = retail_messages[0], retail_messages[3]
    examiner = PairwiseExaminer(RelativeJudge(ScriptedChatModel(reply_fn=quality_judge)))

    verdict = examiner.examine(refuse, oracle, retail_tools)

    assert verdict.distinguishable is True and verdict.better == "b"
    assert verdict.score_a == 0.1 and verdict.score_b == 1.0


def test_a_position_biased_judge_does_not_tell_rollouts_apart(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    examiner = PairwiseExaminer(RelativeJudge(ScriptedChatModel(reply_fn=first_wins_judge)))

    verdict = examiner.examine(retail_messages[0], retail_messages[3], retail_tools)

    assert verdict.distinguishable is False and verdict.better is None
    assert "prefer different rollouts" in verdict.reason


def test_a_gap_under_the_margin_is_not_distinguishable(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    examiner = PairwiseExaminer(RelativeJudge(ScriptedChatModel(reply_fn=quality_judge)), margin=0.95)

    verdict = examiner.examine(retail_messages[0], retail_messages[3], retail_tools)

    assert verdict.distinguishable is False and "under the margin" in verdict.reason


def test_identical_rollouts_make_no_call(retail_messages: list[Messages], retail_tools: Messages) -> None:
    model = ScriptedChatModel([])
    verdict = PairwiseExaminer(RelativeJudge(model)).examine(
        retail_messages[0], retail_messages[0], retail_tools
    )
    assert verdict.distinguishable is False and model.calls == []


def test_a_failing_judge_gives_no_verdict(retail_messages: list[Messages], retail_tools: Messages) -> None:
    model = ScriptedChatModel(["no", "still no"])
    verdict = PairwiseExaminer(RelativeJudge(model)).examine(
        retail_messages[0], retail_messages[3], retail_tools
    )
    assert verdict.distinguishable is None and verdict.error is not None
    assert len(model.calls) == 2, "after the first order fails the second is not asked"
