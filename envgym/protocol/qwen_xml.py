"""Qwen3-Coder XML calls: `<tool_call><function=NAME><parameter=ARG>value</parameter></function></tool_call>`.

A parameter value is JSON-decoded when it parses and kept as a string otherwise (the template writes strings raw),
so the renderer writes a string that would decode as JSON (`"3"`, `"true"`) JSON-quoted, keeping the round trip.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envgym.protocol.calls import ParsedCall, ToolCall, checked, invalid, tool_lines
from envgym.protocol.fastjson import decoder

NAME = "qwen_xml"
FUNCTION = "<function="
_PARAM, _PARAM_END, _FUNCTION_END = "<parameter=", "</parameter>", "</function>"
_decode = decoder()
_EXAMPLE = "<tool_call>\n<function=NAME>\n<parameter=ARG>\nvalue\n</parameter>\n</function>\n</tool_call>"


def _value(raw: str) -> Any:
    # The template puts the value on its own lines: one newline each side belongs to the layout, not the value.
    if raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\n"):
        raw = raw[:-1]
    try:
        return _decode(raw)
    except (json.JSONDecodeError, RecursionError):
        return raw


def _function(block: str, call_id: str) -> ParsedCall:
    """One `<function=NAME>...` element (its text from just after `<function=` up to `</function>`)."""
    close = block.find(">")
    if close == -1:
        return invalid(call_id, block, NAME, f"<function=NAME> is missing its '>'; expected {_EXAMPLE}")
    name = block[:close].strip()
    if not name or "<" in name or "\n" in name:
        return invalid(call_id, block, NAME, f"<function=...> needs a tool name; expected {_EXAMPLE}")
    args: dict[str, Any] = {}
    pos = close + 1
    while (start := block.find(_PARAM, pos)) != -1:
        head = start + len(_PARAM)
        end_name = block.find(">", head)
        if end_name == -1:
            return ParsedCall(call_id, name, None, block[:2000],
                              f"{NAME} tool call: <parameter=ARG> of {name} is missing its '>'")
        arg = block[head:end_name].strip()
        if not arg:
            return ParsedCall(call_id, name, None, block[:2000],
                              f"{NAME} tool call: a <parameter=...> of {name} has no name")
        # Models sometimes drop </parameter>; the next parameter or the end of the function closes it too.
        ends = [i for i in (block.find(_PARAM_END, end_name), block.find(_PARAM, end_name)) if i != -1]
        stop = min(ends) if ends else len(block)
        if arg in args:
            return ParsedCall(call_id, name, None, block[:2000],
                              f"{NAME} tool call: parameter {arg!r} of {name} is given twice")
        args[arg] = _value(block[end_name + 1 : stop])
        pos = stop + len(_PARAM_END) if block.startswith(_PARAM_END, stop) else stop
    return checked(call_id, name, args, NAME)


def parse_functions(text: str, calls: list[ParsedCall], id_prefix: str) -> str:
    """Append the calls of every `<function=...>` element in `text`; return the text around them."""
    outside: list[str] = []
    pos = 0
    while (start := text.find(FUNCTION, pos)) != -1:
        outside.append(text[pos:start])
        end = text.find(_FUNCTION_END, start)
        stop = len(text) if end == -1 else end
        calls.append(_function(text[start + len(FUNCTION) : stop], f"{id_prefix}{len(calls)}"))
        pos = len(text) if end == -1 else end + len(_FUNCTION_END)
    outside.append(text[pos:])
    return "".join(outside).strip()


def _decodes(text: str) -> bool:
    try:
        _decode(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def _render_value(value: Any) -> str:
    if isinstance(value, str) and not _decodes(value) and "<" not in value:
        return value
    # "<" becomes \u003c so no value can close or open a tag; JSON decoding gives it back.
    return json.dumps(value, ensure_ascii=False).replace("<", "\\u003c")


def render_calls(calls: Sequence[ToolCall]) -> str:
    blocks = []
    for call in calls:
        params = "".join(f"<parameter={k}>\n{_render_value(v)}\n</parameter>\n" for k, v in call.arguments.items())
        blocks.append(f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>")
    return "\n".join(blocks)


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    return (
        "You can call these tools. To call one, write exactly\n"
        f"{_EXAMPLE}\n"
        "with one <parameter=...> block per argument. You may write several calls in one turn. Tool results come "
        "back in <tool_response> blocks. To answer the user, write plain text without a tool call.\n"
        f"<tools>\n{tool_lines(tools)}\n</tools>"
    )
