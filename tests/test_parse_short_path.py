"""The short path for one Hermes call (`hermes.parse_single`) gives exactly what the general path gives."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envgym.protocol import _allowed, _text_calls, assistant_message, hermes, parse_action
from envgym.protocol.calls import encode_arguments

# Each of these takes the short path: one closed block of one object with a string name and object arguments.
SHORT = [
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>',
    'Let me look.\n<tool_call>\n {"name": "f", "arguments": {}} \n</tool_call>\nDone (soon).',
    '<tool_call>{"arguments": {"q": "caf\u00e9 \u2603 \\"x\\"", "n": [1, 2.5, null]}, "name": "s\u00fcche"}</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"a": 1}, "id": "extra", "type": "function"}</tool_call>  ',
    '<tool_call>{"name": "f", "arguments": {"nested": {"<tool_call>": "</tool_call"}}}</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"a": "\\ud83d\\ude00"}}</tool_call> then [g(x=1)]',
]
# Each of these leaves it for the general path: errors, several calls, other formats, other shapes.
GENERAL = [
    "", "plain reply to the user", "###STOP###", "<tool_call>", "<tool_call>{</tool_call>",
    '<tool_call>{"name": "f", "arguments": {"a": 1}}',  # unclosed
    '<tool_call>{"name": "f", "arguments": {"a": 1}}</tool_call><tool_call>{"name": "g", "arguments": {}}</tool_call>',
    '<tool_call>[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {}}]</tool_call>',
    "<tool_call>[]</tool_call> [f(a=1)]", '<tool_call>{"name": "f", "arguments": {}} trailing</tool_call>',
    '<tool_call>{"name": "", "arguments": {}}</tool_call>', '<tool_call>{"name": 3, "arguments": {}}</tool_call>',
    '<tool_call>{"name": "f"}</tool_call>', '<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>',
    '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>',
    '<tool_call>{"name": "f", "arguments": null}</tool_call>', '<tool_call>{"name": "f", "arguments": [1]}</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"s": "</tool_call>"}}</tool_call>', "<tool_call>42</tool_call>",
    '<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>',
    '<tool_call>{"name": "f", "arguments": {"s": "<function=g>"}}</tool_call>',
    '[TOOL_CALLS][{"name": "f", "arguments": {}}] <tool_call>{"name": "g", "arguments": {}}</tool_call>',
    "[f(a=1), g(b='x')]",
]


def general(text: str, fmt: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    outside, calls = _text_calls(text, "call_3_", _allowed(fmt))
    return assistant_message(text, outside, calls), calls


@pytest.mark.parametrize("fmt", [None, "hermes", "qwen_xml", "pythonic", "mistral"])
def test_the_short_path_gives_what_the_general_path_gives(fmt: str | None) -> None:
    for text in SHORT + GENERAL:
        assert parse_action(text, "call_3_", fmt) == general(text, fmt), text


def test_the_short_path_takes_the_common_case_and_leaves_the_rest() -> None:
    assert all(hermes.parse_single(text, "call_3_0") is not None for text in SHORT)
    taken = [text for text in GENERAL if "<function=" not in text and "[TOOL_CALLS]" not in text
             and hermes.parse_single(text, "call_3_0") is not None]
    assert taken == []


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
pieces = st.sampled_from(["", " ", "\n", "ok (1)", "<tool_call>", "</tool_call>", "<function=", "[TOOL_CALLS]",
                          '{"name": "f", "arguments": {}}', '"', "{", "}", "\u00e9\u2603"])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=6), json_values, st.dictionaries(st.text(max_size=4), json_values, max_size=2),
       st.lists(pieces, max_size=4), st.lists(pieces, max_size=4), st.booleans())
def test_random_actions_parse_alike_on_both_paths(name: str, args: Any, extra: dict[str, Any], before: list[str],
                                                   after: list[str], spaced: bool) -> None:
    body = json.dumps({**extra, "name": name, "arguments": args}, ensure_ascii=spaced, indent=1 if spaced else None)
    text = f"{''.join(before)}<tool_call>{body}</tool_call>{''.join(after)}"
    assert parse_action(text, "call_3_") == general(text)


@pytest.mark.parametrize("args", [
    {}, {"order_id": "#W0001"}, {"q": "caf\u00e9 \u2603 \"x\" \\ \n\t\x00 \U0001f600", "\u00e9": ""},
    {"a": "1", "b": 2}, {"a": ["x"]}, {1: "int key"}, {"a": None}, [1, "x"], "text", 3,
])
def test_arguments_are_written_as_json_dumps_writes_them(args: Any) -> None:
    assert encode_arguments(args) == json.dumps(args)
