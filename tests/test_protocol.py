"""Parsing actions: Hermes, Qwen3-Coder XML, pythonic and Mistral text, OpenAI messages, parallel calls, malformed
input; rendering each format back and detecting it from a chat template."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envgym  # noqa: F401  (registers the bundled environments)
from envgym.protocol import (
    FORMATS,
    INVALID_CALL_NAME,
    ToolCall,
    detect_format,
    parse_action,
    renderer,
    split_tool_calls,
)


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


# ---------------------------------------------------------------- every format: parse, render, round trip


RENDERERS = [*FORMATS, "mistral_v11"]


def _calls(text: str, fmt: str | None = None) -> list[tuple[str, object, str | None]]:
    return [(c.name, c.arguments, c.error) for c in parse_action(text, fmt=fmt)[1]]


@pytest.mark.parametrize(("text", "fmt"), [
    ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}</tool_call>', "hermes"),
    ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
     "</parameter>\n</function>\n</tool_call>", "qwen_xml"),
    ('[get_weather(city="Paris", days=3)]', "pythonic"),
    ('<|python_start|>[get_weather(city="Paris", days=3)]<|python_end|>', "pythonic"),
    ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}]</s>', "mistral"),
    ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}', "mistral"),
    ('[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris", "days": 3}', "mistral"),
])
def test_each_format_is_read_by_default_and_when_pinned(text: str, fmt: str) -> None:
    expected = [("get_weather", {"city": "Paris", "days": 3}, None)]
    assert _calls(text) == expected
    assert _calls(text, fmt) == expected


def test_qwen_values_that_are_not_json_stay_strings() -> None:
    text = "<function=f>\n<parameter=q>\nhello world\n</parameter>\n<parameter=n>\n[1, 2]\n</parameter>\n</function>"
    assert _calls(text) == [("f", {"q": "hello world", "n": [1, 2]}, None)]


def test_pythonic_accepts_json_literals_and_keyword_names_through_double_star() -> None:
    assert _calls('[f(flag=true, none=null, **{"from": "2024-01-01"}), g()]') == [
        ("f", {"flag": True, "none": None, "from": "2024-01-01"}, None), ("g", {}, None)]


def test_a_reply_that_merely_starts_with_a_bracket_is_text() -> None:
    message, calls = parse_action("[Note] your order (#W0001) shipped.")
    assert calls == [] and message["content"] == "[Note] your order (#W0001) shipped."


def test_text_around_calls_becomes_the_message_content() -> None:
    message, calls = parse_action('Checking now. [TOOL_CALLS][{"name": "f", "arguments": {}}]')
    assert message["content"] == "Checking now." and [c.name for c in calls] == ["f"]


@pytest.mark.parametrize(("text", "fmt", "problem"), [
    ("[f(1)]", "pythonic", "keyword arguments only"),
    ("[f(x=open('/etc/passwd'))]", "pythonic", "must be a literal"),
    ("[f(x=__import__('os').system('true'))]", "pythonic", "must be a literal"),
    ("[f(x=1,, y=2)]", "pythonic", "not valid Python syntax"),
    ("<tool_call><function=>\n</function></tool_call>", "qwen_xml", "needs a tool name"),
    ("<tool_call><function=f><parameter=a>1</parameter><parameter=a>2</parameter></function></tool_call>",
     "qwen_xml", "given twice"),
    ('[TOOL_CALLS][{"name": "f", "arguments": {', "mistral", "not valid JSON"),
    ("[TOOL_CALLS]f[ARGS]{oops}", "mistral", "not valid JSON"),
    ('[TOOL_CALLS]{"arguments": {}}', "mistral", '"name"'),
])
def test_a_malformed_call_is_an_error_naming_the_problem_and_the_format(text: str, fmt: str, problem: str) -> None:
    (call,) = parse_action(text)[1]
    assert call.arguments is None and call.error is not None
    assert call.error.startswith(f"{fmt} tool call:") and problem in call.error


def test_a_pinned_format_answers_another_format_with_how_to_write_it() -> None:
    (call,) = parse_action('<tool_call>{"name": "f", "arguments": {}}</tool_call>', fmt="qwen_xml")[1]
    assert call.name == INVALID_CALL_NAME and call.error is not None
    assert "reads qwen_xml" in call.error and "holds a hermes call" in call.error and "<function=" in call.error


def test_an_unknown_format_name_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool-call format 'yaml'"):
        parse_action("hi", fmt="yaml")


@pytest.mark.parametrize(("template", "name"), [
    ("{% for tool in tools %}<tool_call>\n<function=example_function_name>\n<parameter=x>", "qwen_xml"),
    ("{{- '<tool_call>\\n' + tool_call | tojson + '\\n</tool_call>' }}", "hermes"),
    ("{{- '[TOOL_CALLS]' + tool_call.name + '[ARGS]' + args }}", "mistral_v11"),
    ("{{- '[TOOL_CALLS][' }}{% for tool_call in message.tool_calls %}", "mistral"),
    ("put it in the format of [func_name1(params_name1=params_value1, params_name2=params_value2...)]", "pythonic"),
    ("{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}", "hermes"),
    (None, "hermes"),
])
def test_the_format_is_detected_from_a_chat_template(template: str | None, name: str) -> None:
    assert detect_format(template) == name


def test_the_env_reads_and_writes_a_pinned_format() -> None:
    env = gym.make("envgym/retail-v0", tool_format="pythonic").unwrapped
    obs, _ = env.reset(seed=0)
    assert "list of calls in Python syntax" in obs
    obs, *_ = env.step('[get_order_details(order_id="#W0001")]')
    assert obs.startswith("ipython: ") and '"order_id": "#W0001"' in obs
    obs, *_ = env.step('<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>')
    assert "reads pythonic tool calls" in obs


def test_by_default_the_env_reads_every_format() -> None:
    env = gym.make("envgym/retail-v0").unwrapped
    env.reset(seed=0)
    for action in ('[get_order_details(order_id="#W0001")]', '[TOOL_CALLS]get_order_details[ARGS]{"order_id": "#W0001"}',
                   "<tool_call><function=get_order_details><parameter=order_id>#W0001</parameter></function></tool_call>"):
        obs, *_ = env.step(action)
        assert obs.startswith("<tool_response>") and '"order_id": "#W0001"' in obs, action


# ---------------------------------------------------------------- properties

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True).filter(lambda n: n not in {
    "None", "True", "False", "and", "or", "not", "in", "is", "if", "else", "for", "def", "class", "from", "import",
    "lambda", "return", "while", "with", "as", "try", "except", "finally", "raise", "pass", "break", "continue",
    "global", "nonlocal", "del", "assert", "yield", "await", "async", "elif", "match", "case", "type", "_"})
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-10**12, 10**12) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)
_arg_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_\-]{0,15}", fullmatch=True)
_tool_calls = st.lists(st.builds(ToolCall, _names, st.dictionaries(_arg_names, _json, max_size=4)),
                       min_size=1, max_size=3)


@pytest.mark.parametrize("name", RENDERERS)
@settings(max_examples=150, deadline=None)
@given(calls=_tool_calls)
def test_rendered_calls_parse_back_to_the_same_calls(name: str, calls: list[ToolCall]) -> None:
    text = renderer(name).calls(calls)
    for fmt in (None, name):
        parsed = parse_action(text, fmt=fmt)[1]
        assert [c.error for c in parsed] == [None] * len(calls), text
        assert [ToolCall(c.name, c.arguments) for c in parsed] == calls, text


@pytest.mark.parametrize("text", ["<function=", "[TOOL_CALLS]", '<tool_call>{"name": "x", "arguments": {}}</tool_call>'])
def test_another_formats_marker_inside_a_pythonic_string_is_only_text(text: str) -> None:
    """Found by the round-trip property above: `[f(a='<function=')]` was read as a broken qwen_xml call."""
    call = ToolCall("f", {"a": text, "b": 1})
    rendered = renderer("pythonic").calls([call])
    for fmt in (None, "pythonic"):
        parsed = parse_action(rendered, fmt=fmt)[1]
        assert [(c.name, c.arguments, c.error) for c in parsed] == [("f", call.arguments, None)]


_fragments = st.sampled_from([
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>", ">", "[TOOL_CALLS]",
    "[ARGS]", "[CALL_ID]", "</s>", "[", "]", "(", ")", "=", ",", '"', "{", "}", ":", "**", "f", "x", "1", "\n",
    "<|python_start|>", "<|python_end|>", "true", "null", "'", "\\", "name", "arguments", " ",
])
_garbage = st.lists(_fragments | st.text(max_size=8), max_size=40).map("".join)


@pytest.mark.parametrize("fmt", [None, *FORMATS])
@settings(max_examples=300, deadline=None)
@given(text=_garbage | st.text())
def test_the_parser_never_raises_and_every_error_names_its_format(fmt: str | None, text: str) -> None:
    message, calls = parse_action(text, fmt=fmt)
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    for call in calls:
        if call.error is None:
            assert isinstance(call.arguments, dict) and call.name
        else:
            assert call.arguments is None and call.error.split(" tool call: ")[0] in FORMATS


@settings(max_examples=100, deadline=None)
@given(depth=st.integers(1, 5000))
def test_deep_nesting_is_an_error_not_a_crash(depth: int) -> None:
    for text in (f"[f(x={'[' * depth}{']' * depth})]", f"[TOOL_CALLS]f[ARGS]{'[' * depth}",
                 f"<function=f><parameter=x>{'[' * depth}{']' * depth}</parameter></function>"):
        parse_action(text)


def test_arguments_too_deep_to_encode_are_an_error_call_not_a_crash() -> None:
    import sys

    from envgym.protocol.calls import checked

    value: list[object] = []
    for _ in range(sys.getrecursionlimit() + 50):  # built without recursion; encoding it recurses past the limit
        value = [value]
    call = checked("c0", "f", {"x": value}, "qwen xml")
    assert call.arguments is None and call.name == "f"
    assert call.error == "qwen xml tool call: the arguments of f are nested too deeply"
