"""Per-tool-call rewards over real retail conversations and small hand-made ones."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from envgym.loader import load_environment
from envgym.registry import find_env_dir
from envgym.rewards.toolcalls import (
    ToolCallRecord,
    ToolCallReward,
    ToolCallWeights,
    result_values,
    score_tool_calls,
    shaping_reward,
    state_distance,
)

Messages = list[dict[str, Any]]
WRITES = {
    "place_order",
    "cancel_pending_order",
    "modify_pending_order_address",
    "return_delivered_order",
    "update_user_address",
}


def records_from(
    messages: Messages, distances: dict[int, tuple[int, int]] | None = None
) -> list[ToolCallRecord]:
    """Records as the env would make them: a call is ok unless its result is an error; writes change state."""
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    records: list[ToolCallRecord] = []
    for step, message in enumerate(m for m in messages if m["role"] == "assistant"):
        for call in message.get("tool_calls") or []:
            fn = call["function"]
            result = results[call["id"]]
            ok = not result.startswith('{"error"')
            pair = (distances or {}).get(len(records))
            before, after = pair if pair else (None, None)
            records.append(
                ToolCallRecord(
                    step,
                    fn["name"],
                    json.loads(fn["arguments"]),
                    ok,
                    None if ok else result,
                    result,
                    ok and fn["name"] in WRITES,
                    before,
                    after,
                )
            )
    return records


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def result(call_id: str, name: str, content: Any) -> dict[str, Any]:
    text = content if isinstance(content, str) else json.dumps(content)
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": text}


USER = [
    {"role": "system", "content": "You are a shop agent."},
    {"role": "user", "content": "Where is my order #W0012? My email is kim@example.org."},
]


def test_oracle_calls_are_valid_needed_and_not_redundant(retail_messages: list[Messages]) -> None:
    oracle = retail_messages[0]
    records = records_from(oracle)
    last = len(records) - 1
    # Only the final write moves the state; the lookups are needed because their results are used.
    rewards = score_tool_calls(records_from(oracle, {last: (1, 0)}), oracle)

    assert [r.valid for r in rewards] == [True] * len(records)
    assert [r.needed for r in rewards] == [True] * len(records)
    assert not any(r.redundant for r in rewards)


def test_random_agent_errors_are_labelled_and_penalised(retail_messages: list[Messages]) -> None:
    rewards = score_tool_calls(records_from(retail_messages[1]), retail_messages[1])

    errors = [r for r in rewards if r.error]
    assert errors, "the seeded random agent is expected to make failing calls"
    assert all(not r.needed and r.reward <= ToolCallWeights().error for r in errors)


def test_a_lookup_whose_result_is_never_used_is_not_needed() -> None:
    messages = [
        *USER,
        call("c0", "get_user_details", user_id="U0001"),
        result("c0", "get_user_details", {"user_id": "U0001", "name": "Kim Lee", "city": "Lisbon"}),
        {"role": "assistant", "content": "Sorry, I cannot find that."},
    ]
    [reward] = score_tool_calls(records_from(messages), messages)
    assert reward.valid and not reward.needed


def test_a_result_value_used_in_a_later_reply_makes_the_call_needed() -> None:
    messages = [
        *USER,
        call("c0", "get_order_details", order_id="#W0012"),
        result("c0", "get_order_details", {"order_id": "#W0012", "status": "shipped", "eta": "2024-05-02"}),
        {"role": "assistant", "content": "It ships and arrives on 2024-05-02."},
    ]
    [reward] = score_tool_calls(records_from(messages), messages)
    assert reward.needed


def test_repeating_a_value_the_agent_already_had_does_not_count_as_use() -> None:
    messages = [
        *USER,
        call("c0", "get_order_details", order_id="#W0012"),
        result("c0", "get_order_details", {"order_id": "#W0012", "status": "shipped"}),
        {"role": "assistant", "content": "I looked at order #W0012."},
    ]
    [reward] = score_tool_calls(records_from(messages), messages)
    assert not reward.needed


def test_a_write_that_moves_toward_the_target_is_needed() -> None:
    messages = [
        *USER,
        call("c0", "cancel_pending_order", order_id="#W0012", reason="no longer needed"),
        result("c0", "cancel_pending_order", {"status": "cancelled"}),
        {"role": "assistant", "content": "Done."},
    ]
    [toward] = score_tool_calls(records_from(messages, {0: (2, 1)}), messages)
    [away] = score_tool_calls(records_from(messages, {0: (1, 2)}), messages)
    assert toward.needed and not away.needed


def test_an_identical_repeat_without_a_state_change_is_redundant() -> None:
    lookup = {"order_id": "#W0012", "status": "pending"}
    messages = [
        *USER,
        call("c0", "get_order_details", order_id="#W0012"),
        result("c0", "get_order_details", lookup),
        call("c1", "get_order_details", order_id="#W0012"),
        result("c1", "get_order_details", lookup),
    ]
    first, second = score_tool_calls(records_from(messages), messages)
    assert not first.redundant and second.redundant
    assert second.reward == pytest.approx(ToolCallWeights().valid + ToolCallWeights().redundant)


def test_a_repeat_after_a_state_change_is_not_redundant() -> None:
    messages = [
        *USER,
        call("c0", "get_order_details", order_id="#W0012"),
        result("c0", "get_order_details", {"order_id": "#W0012", "status": "pending"}),
        call("c1", "cancel_pending_order", order_id="#W0012", reason="no longer needed"),
        result("c1", "cancel_pending_order", {"status": "cancelled"}),
        call("c2", "get_order_details", order_id="#W0012"),
        result("c2", "get_order_details", {"order_id": "#W0012", "status": "cancelled"}),
    ]
    rewards = score_tool_calls(records_from(messages), messages)
    assert [r.redundant for r in rewards] == [False, False, False]


def test_records_must_match_the_calls_in_the_messages(retail_messages: list[Messages]) -> None:
    oracle = retail_messages[0]
    records = records_from(oracle)
    with pytest.raises(ValueError, match="records but"):
        score_tool_calls(records[:-1], oracle)
    renamed = [dataclasses.replace(records[0], name="get_user_details"), *records[1:]]
    with pytest.raises(ValueError, match="record 0 is 'get_user_details'"):
        score_tool_calls(renamed, oracle)


def test_default_weights_are_the_documented_ones() -> None:
    assert ToolCallWeights() == ToolCallWeights(valid=0.0, error=-0.1, needed=0.1, redundant=-0.1)


def test_custom_weights_and_the_episode_total() -> None:
    messages = [
        *USER,
        call("c0", "get_order_details", order_id="#W0099"),
        result("c0", "get_order_details", '{"error": "no orders with order_id=\'#W0099\'"}'),
    ]
    weights = ToolCallWeights(error=-1.0)
    rewards = score_tool_calls(records_from(messages), messages, weights)
    assert rewards[0].reward == -1.0
    assert shaping_reward([*rewards, ToolCallReward(1, "x", True, True, False, 0.25)]) == -0.75
    assert rewards[0].as_info() == {
        "step": rewards[0].step,
        "name": "get_order_details",
        "valid": False,
        "error": True,
        "needed": False,
        "redundant": False,
        "credited": False,
        "broke_rule": False,
        "reward": -1.0,
    }


def test_result_values_skip_short_and_common_values() -> None:
    assert result_values('{"ok": true, "id": "U0007", "n": 2, "total": 625.98, "status": "ok"}') == {
        "U0007",
        "625.98",
    }
    assert result_values("Found user U0007 (kim@example.org).") == {"U0007", "kim@example.org"}


def test_state_distance_shrinks_to_zero_along_the_reference_solution() -> None:
    data = load_environment(str(find_env_dir("retail")))
    task = next(t for t in data.tasks if t.solution and t.id.startswith("cancel"))
    target = data.target_state(task)
    state = data.initial.copy()
    distances = [state_distance(state, target)]
    for step in task.solution:
        assert data.executor.execute(state, step.name, step.arguments).ok
        distances.append(state_distance(state, target))
    assert distances[0] > 0 and distances[-1] == 0
    assert distances == sorted(distances, reverse=True)
