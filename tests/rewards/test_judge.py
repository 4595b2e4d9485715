"""The relative judge with a scripted judge model: prompt shape, reply validation, retries, cache, skips."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from envgym.llm.base import ChatResponse
from envgym.llm.scripted import ScriptedChatModel
from envgym.rewards.judge import JudgeConfig, RelativeJudge, cache_key, load_judge_model
from envgym.rewards.judge_prompt import (
    DEFAULT_RUBRIC,
    JudgeParseError,
    build_judge_prompt,
    parse_scores,
    rubric_text,
    shared_prefix_length,
)

Messages = list[dict[str, Any]]


def reply(*items: tuple[int, float], explanation: str = "fine") -> str:
    return json.dumps(
        {"scores": [{"trajectory_id": i, "explanation": explanation, "score": s} for i, s in items]}
    )


def judge_with(replies: list[str], **config: Any) -> tuple[RelativeJudge, ScriptedChatModel]:
    model = ScriptedChatModel(replies, name="scripted-judge")
    return RelativeJudge(model, JudgeConfig(**config)), model


def test_prompt_holds_the_shared_prefix_exactly_once(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    system, first_user = retail_messages[0][0]["content"], retail_messages[0][1]["content"]
    judge, model = judge_with([reply((1, 1.0), (2, 0.2), (3, 0.1), (4, 0.0))])

    judge.score_group(retail_messages, retail_tools)

    prompt = "\n".join(m["content"] for m in model.calls[0])
    assert prompt.count(system) == 1
    assert prompt.count(first_user) == 1
    assert prompt.count("<trajectory id=") == 4


def test_prompt_without_deduplication_repeats_the_prefix(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    system = retail_messages[0][0]["content"]
    prompt = build_judge_prompt(retail_messages, retail_tools, DEFAULT_RUBRIC, deduplicate_prefix=False)
    assert prompt[1]["content"].count(system) == 4


def test_each_trajectory_block_holds_only_its_own_part(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    k = shared_prefix_length(retail_messages)
    user = build_judge_prompt(retail_messages, retail_tools, DEFAULT_RUBRIC)[1]["content"]
    blocks = user.split("<trajectory id=")[1:]
    assert k >= 2
    for messages, block in zip(retail_messages, blocks, strict=True):
        first_own = messages[k]
        assert (first_own.get("content") or first_own["tool_calls"][0]["function"]["name"]) in block


def test_shared_prefix_length_counts_equal_leading_messages() -> None:
    a = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "x"},
    ]
    b = [*a[:2], {"role": "assistant", "content": "y"}]
    assert shared_prefix_length([a, b]) == 2
    assert shared_prefix_length([a, a[:1]]) == 1


def test_scores_are_mapped_by_id_when_returned_out_of_order(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    judge, _ = judge_with([reply((3, 0.3), (1, 0.9), (4, 0.0), (2, 0.5))])

    result = judge.score_group(retail_messages, retail_tools)

    assert result.status == "scored"
    assert result.values == [0.9, 0.5, 0.3, 0.0]
    assert [s.trajectory_id for s in result.scores or []] == [1, 2, 3, 4]


def test_malformed_json_is_retried_once_with_the_reason(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    judge, model = judge_with(
        ['{"scores": [{"trajectory_id": 1, "score": 0.5', reply((1, 1), (2, 0), (3, 0), (4, 0))]
    )

    result = judge.score_group(retail_messages, retail_tools)

    assert result.status == "scored" and result.model_calls == 2
    assert judge.metrics.parse_failures == 1 and judge.metrics.failed_groups == 0
    assert "malformed JSON" in model.calls[1][-1]["content"]


def test_two_bad_replies_fail_the_group_without_scores(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    judge, model = judge_with(["I think the first one is best.", "not json either"])

    result = judge.score_group(retail_messages, retail_tools)

    assert result.status == "failed" and result.scores is None and result.values is None
    assert result.error is not None and "no JSON object" in result.error
    assert len(model.calls) == 2
    assert judge.metrics.as_dict()["judge/failed_groups"] == 1
    assert judge.metrics.parse_failures == 2


def test_missing_id_is_rejected_and_retried(retail_messages: list[Messages], retail_tools: Messages) -> None:
    judge, model = judge_with([reply((1, 1), (2, 0), (4, 0)), reply((1, 1), (2, 0), (3, 0.5), (4, 0))])

    result = judge.score_group(retail_messages, retail_tools)

    assert result.values == [1.0, 0.0, 0.5, 0.0]
    assert "missing [3]" in model.calls[1][-1]["content"]


@pytest.mark.parametrize(
    "items, fragment",
    [
        ([(1, 0.1), (2, 0.2), (2, 0.3)], "repeated [2]"),
        ([(1, 0.1), (2, 0.2), (3, 0.3), (4, 0.4)], "unexpected or repeated [4]"),
        ([(0, 0.1), (1, 0.2), (2, 0.3)], "missing [3]"),
    ],
)
def test_ids_must_be_exactly_one_to_n(items: list[tuple[int, float]], fragment: str) -> None:
    with pytest.raises(JudgeParseError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        parse_scores(reply(*items), 3)


@pytest.mark.parametrize("score", [1.5, -0.1, math.inf])
def test_out_of_range_scores_are_rejected(score: float) -> None:
    text = reply((1, 0.5), (2, score)).replace("Infinity", "1e999")
    with pytest.raises(JudgeParseError, match=r"scores\.1\.score"):
        parse_scores(text, 2)


def test_out_of_range_score_fails_the_group_after_the_retry(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    bad = reply((1, 1.2), (2, 0), (3, 0), (4, 0))
    judge, _ = judge_with([bad, bad])

    result = judge.score_group(retail_messages, retail_tools)

    assert result.status == "failed"
    assert result.error is not None and "less than or equal to 1" in result.error


def test_json_inside_prose_and_code_fences_is_read() -> None:
    text = "Here are the scores:\n```json\n" + reply((2, 0.25), (1, 0.75)) + "\n```\nThanks."
    assert [s.score for s in parse_scores(text, 2)] == [0.75, 0.25]


def test_explanations_are_one_line() -> None:
    scores = parse_scores(reply((1, 0.5), explanation="first line\n  second   line"), 1)
    assert scores[0].explanation == "first line second line"


def test_identical_trajectories_make_no_call(retail_messages: list[Messages], retail_tools: Messages) -> None:
    judge, model = judge_with([])

    result = judge.score_group([retail_messages[0]] * 4, retail_tools)

    assert result.status == "identical" and result.scores is None
    assert model.calls == []
    assert judge.metrics.identical_skips == 1


def test_a_cache_hit_makes_zero_calls(
    tmp_path: Path, retail_messages: list[Messages], retail_tools: Messages
) -> None:
    first, _ = judge_with([reply((1, 0.9), (2, 0.4), (3, 0.2), (4, 0.0))], cache_dir=tmp_path)
    scored = first.score_group(retail_messages, retail_tools)
    again, model = judge_with([], cache_dir=tmp_path)

    cached = again.score_group(retail_messages, retail_tools)

    assert cached.status == "cached" and cached.scores == scored.scores
    assert model.calls == []
    assert again.metrics.cache_hits == 1
    assert not list(tmp_path.rglob(".tmp-*")), "the atomic write left a temp file behind"


def test_the_cache_key_changes_with_rubric_tools_model_and_trajectories(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    base = cache_key("m", "r", retail_tools, retail_messages)
    assert cache_key("m", "r", retail_tools, retail_messages) == base
    assert cache_key("other", "r", retail_tools, retail_messages) != base
    assert cache_key("m", "other", retail_tools, retail_messages) != base
    assert cache_key("m", "r", retail_tools[1:], retail_messages) != base
    assert cache_key("m", "r", retail_tools, retail_messages[::-1]) != base


def test_a_failed_group_is_not_cached(
    tmp_path: Path, retail_messages: list[Messages], retail_tools: Messages
) -> None:
    failing, _ = judge_with(["nope", "nope"], cache_dir=tmp_path)
    failing.score_group(retail_messages, retail_tools)
    retry, model = judge_with([reply((1, 1), (2, 0), (3, 0), (4, 0))], cache_dir=tmp_path)

    assert retry.score_group(retail_messages, retail_tools).status == "scored"
    assert len(model.calls) == 1


def test_a_corrupt_cache_entry_is_a_miss(
    tmp_path: Path, retail_messages: list[Messages], retail_tools: Messages
) -> None:
    first, _ = judge_with([reply((1, 1), (2, 0), (3, 0), (4, 0))], cache_dir=tmp_path)
    first.score_group(retail_messages, retail_tools)
    for entry in tmp_path.rglob("*.json"):
        entry.write_text("{truncated")
    again, model = judge_with([reply((1, 0.5), (2, 0), (3, 0), (4, 0))], cache_dir=tmp_path)

    assert again.score_group(retail_messages, retail_tools).values == [0.5, 0.0, 0.0, 0.0]
    assert len(model.calls) == 1


def test_the_task_rubric_replaces_the_default(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    judge, model = judge_with([reply((1, 1), (2, 0), (3, 0), (4, 0))])
    criteria = rubric_text(["Confirms before placing the order.", "  ", "Quotes the exact total."])

    judge.score_group(retail_messages, retail_tools, criteria)

    system = model.calls[0][0]["content"]
    assert "- Confirms before placing the order.\n- Quotes the exact total." in system
    assert DEFAULT_RUBRIC not in system
    assert rubric_text([]) is None


class GuidedDouble:
    """A judge-model double offering grammar-guided decoding; it records the group sizes it was asked for."""

    name = "guided-double"

    def __init__(self) -> None:
        self.asked: list[int] = []

    def chat(
        self,
        messages: Messages,
        tools: Messages | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        raise AssertionError("the judge must use chat_scores when the model offers it")

    def chat_scores(self, messages: Messages, n_trajectories: int) -> ChatResponse:
        self.asked.append(n_trajectories)
        return ChatResponse(reply(*[(i, 0.5) for i in range(1, n_trajectories + 1)]))


def test_guided_decoding_is_used_when_the_model_offers_it(
    retail_messages: list[Messages], retail_tools: Messages
) -> None:
    model = GuidedDouble()
    judge = RelativeJudge(model)

    result = judge.score_group(retail_messages, retail_tools)

    assert model.asked == [4] and result.values == [0.5] * 4
    assert judge.model_id == "guided-double+guided"


def test_an_empty_group_is_an_error() -> None:
    judge, _ = judge_with([])
    with pytest.raises(ValueError, match="group is empty"):
        judge.score_group([], [])


def test_judge_models_come_from_model_specs(retail_messages: list[Messages], retail_tools: Messages) -> None:
    model = load_judge_model("scripted", replies=[reply((1, 1), (2, 0), (3, 0), (4, 0))])
    assert RelativeJudge(model).score_group(retail_messages, retail_tools).status == "scored"
    with pytest.raises(ValueError, match="unknown model spec"):
        load_judge_model("nonsense")
