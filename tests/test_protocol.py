"""Parsing actions: Hermes text, OpenAI messages, parallel calls, malformed input."""

from __future__ import annotations

from envgym.protocol import INVALID_CALL_NAME, parse_action, split_tool_calls


def test_hermes_text_call() -> None:
    message, calls = parse_action('Let me look. <tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call>')
    assert [(c.name, c.arguments, c.error) for c in calls] == [("f", {"a": 1}, None)]
    assert message["content"] == "Let me look."
    assert message["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}


def test_parallel_calls_in_one_block_and_in_several() -> None:
    _, calls = parse_action('<tool_call>[{"name": "a"}, {"name": "b"}]</tool_call><tool_call>{"name": "c"}</tool_call>')
    assert [c.name for c in calls] == ["a", "b", "c"]
    assert len({c.id for c in calls}) == 3


def test_openai_message_with_string_arguments() -> None:
    message, calls = parse_action({"role": "assistant", "content": None, "tool_calls": [
        {"id": "x1", "type": "function", "function": {"name": "f", "arguments": '{"q": "hi"}'}}]})
    assert calls[0].id == "x1" and calls[0].arguments == {"q": "hi"}
    assert message["content"] == ""


def test_malformed_json_becomes_a_call_with_an_error() -> None:
    _, calls = parse_action('<tool_call>{"name": "f", "arguments": {</tool_call>')
    assert calls[0].name == INVALID_CALL_NAME
    assert "not valid JSON" in (calls[0].error or "")


def test_bad_argument_json_keeps_the_name() -> None:
    _, calls = parse_action({"tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]})
    assert calls[0].name == "f" and "not valid JSON" in (calls[0].error or "")


def test_unclosed_block_runs_to_the_end() -> None:
    assert split_tool_calls('hi <tool_call>{"name": "f"}') == ("hi", ['{"name": "f"}'])


def test_plain_text_is_a_reply() -> None:
    message, calls = parse_action("Your order is on its way.")
    assert calls == [] and message == {"role": "assistant", "content": "Your order is on its way."}
