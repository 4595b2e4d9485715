"""Hermes/Qwen JSON calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, results in `<tool_response>`.

The `<tool_call>` block is shared with Qwen3-Coder's XML calls; `split_tool_calls` finds the blocks for both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envgym.protocol.calls import (
    ParsedCall,
    ToolCall,
    call_from_object,
    encode_arguments,
    invalid,
    tool_lines,
)
from envgym.protocol.fastjson import decoder

NAME = "hermes"
OPEN, CLOSE = "<tool_call>", "</tool_call>"
_decode = decoder()


def split_tool_calls(text: str) -> tuple[str, list[str]]:
    """(text outside the blocks, the body of each `<tool_call>` block); an unclosed block runs to the end."""
    bodies: list[str] = []
    outside: list[str] = []
    pos = 0
    while (start := text.find(OPEN, pos)) != -1:
        outside.append(text[pos:start])
        end = text.find(CLOSE, start + len(OPEN))
        if end == -1:
            bodies.append(text[start + len(OPEN) :])
            pos = len(text)
            break
        bodies.append(text[start + len(OPEN) : end])
        pos = end + len(CLOSE)
    outside.append(text[pos:])
    return "".join(outside).strip(), bodies


def parse_body(body: str, calls: list[ParsedCall], id_prefix: str) -> None:
    """The calls in one block body (one JSON object or a list of them), appended to `calls`."""
    try:
        obj = _decode(body)
    except json.JSONDecodeError as exc:
        calls.append(invalid(
            f"{id_prefix}{len(calls)}", body, NAME,
            f"the tool call is not valid JSON ({exc.msg} at char {exc.pos}); "
            'expected <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
        ))
        return
    for item in obj if isinstance(obj, list) else [obj]:
        calls.append(call_from_object(item, f"{id_prefix}{len(calls)}", body, NAME))


def parse_single(text: str, call_id: str) -> tuple[str, ParsedCall] | None:
    """(text outside, the call) when `text` holds one closed `<tool_call>` block of one JSON object with a string
    name and an object of arguments; else None. The caller checks that no other format's marker is in `text`.

    The same result as `split_tool_calls`, `parse_body` and `call_from_object` in fewer steps: most steps parse one
    such call, and parsing was the larger part of a lookup step. Anything else, errors included, is left to them.
    """
    start = text.find(OPEN)
    if start == -1:
        return None
    end = text.find(CLOSE, start + len(OPEN))
    if end == -1 or text.find(OPEN, end + len(CLOSE)) != -1:
        return None
    try:
        obj = _decode(text[start + len(OPEN) : end])
    except ValueError:
        return None
    if type(obj) is not dict or "arguments" not in obj:
        return None
    name, args = obj.get("name"), obj["arguments"]
    if type(name) is not str or not name or type(args) is not dict:
        return None
    return (text[:start] + text[end + len(CLOSE) :]).strip(), ParsedCall(call_id, name, args, encode_arguments(args))


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call in Hermes text form."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def render_calls(calls: Sequence[ToolCall]) -> str:
    return "\n".join(format_tool_call(c.name, c.arguments) for c in calls)


def render_result(content: str, call_id: str) -> str:
    return f"<tool_response>\n{content}\n</tool_response>"


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The tools block for models whose chat template does not render tools (Hermes style)."""
    return (
        "You can call these tools. To call one, write exactly\n"
        '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>\n'
        "You may write several calls in one turn. Tool results come back in <tool_response> blocks. "
        "To answer the user, write plain text without a tool call.\n"
        f"<tools>\n{tool_lines(tools)}\n</tools>"
    )
