"""Tool calls in and out: Hermes/Qwen `<tool_call>` text, OpenAI `tool_calls` messages, tool-result messages.

`parse_action` turns whatever a policy produced into an OpenAI-format assistant message plus a list of parsed
calls. It never raises: a call that cannot be parsed becomes a `ParsedCall` with an `error` that the env answers
with a tool error message, so the agent can recover.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OPEN, CLOSE = "<tool_call>", "</tool_call>"
INVALID_CALL_NAME = "invalid_tool_call"
# One encoder for all tool results: json.dumps builds a new encoder on every call with non-default options.
_RESULT_ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
_ARGS_ENCODER = json.JSONEncoder()
_decode = json.JSONDecoder().decode


@dataclass(slots=True)
class ParsedCall:
    """One tool call taken from an action; `error` says why it cannot be executed (then name may be a guess)."""

    id: str
    name: str
    arguments: Any
    raw_arguments: str
    error: str | None = None


def _call_from_obj(obj: Any, call_id: str, raw: str) -> ParsedCall:
    if not isinstance(obj, dict):
        return ParsedCall(
            call_id, INVALID_CALL_NAME, None, raw, f"a tool call must be a JSON object, got {raw[:80]!r}"
        )
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return ParsedCall(call_id, INVALID_CALL_NAME, None, raw, 'a tool call needs a string "name" field')
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        raw_args = args
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ParsedCall(
                call_id, name, None, raw_args, f"arguments of {name} are not valid JSON: {exc.msg}"
            )
    else:
        raw_args = _ARGS_ENCODER.encode(args)
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ParsedCall(call_id, name, None, raw_args, f'"arguments" of {name} must be a JSON object')
    return ParsedCall(call_id, name, args, raw_args)


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


def parse_text_calls(text: str, id_prefix: str) -> list[ParsedCall]:
    """Every `<tool_call>...</tool_call>` block in `text` (a block may hold one object or a list of them)."""
    return _parse_bodies(split_tool_calls(text)[1], id_prefix)


def _parse_bodies(bodies: list[str], id_prefix: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = []
    for body in bodies:
        try:
            obj = _decode(body)
        except json.JSONDecodeError as exc:
            calls.append(
                ParsedCall(
                    f"{id_prefix}{len(calls)}",
                    INVALID_CALL_NAME,
                    None,
                    body,
                    f"the tool call is not valid JSON ({exc.msg} at char {exc.pos}); "
                    'expected <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
                )
            )
            continue
        for item in obj if isinstance(obj, list) else [obj]:
            calls.append(_call_from_obj(item, f"{id_prefix}{len(calls)}", body))
    return calls


def _calls_from_message(message: dict[str, Any], id_prefix: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        call_id = f"{id_prefix}{i}"
        if not isinstance(tc, dict):
            calls.append(
                ParsedCall(call_id, INVALID_CALL_NAME, None, repr(tc)[:200], "a tool call must be an object")
            )
            continue
        call_id = str(tc.get("id") or call_id)
        fn = tc.get("function", tc)
        calls.append(
            _call_from_obj(fn if isinstance(fn, dict) else None, call_id, json.dumps(fn, default=str)[:2000])
        )
    return calls


def parse_action(action: Any, id_prefix: str = "call_") -> tuple[dict[str, Any], list[ParsedCall]]:
    """Normalise an action (text or OpenAI message dict) into (assistant message, parsed calls)."""
    if isinstance(action, dict):
        content = action.get("content")
        text = content if isinstance(content, str) else ""
        calls = _calls_from_message(action, id_prefix)
        if not calls and OPEN in text:
            calls = parse_text_calls(text, id_prefix)
    else:
        text = action if isinstance(action, str) else str(action)
        calls, outside = [], text
        if OPEN in text:
            outside, bodies = split_tool_calls(text)
            calls = _parse_bodies(bodies, id_prefix)
    content = text
    if calls:
        content = outside if isinstance(action, str) else strip_tool_calls(text)
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in calls
        ]
    return message, calls


def strip_tool_calls(text: str) -> str:
    """The text of an assistant turn without its tool-call blocks."""
    return split_tool_calls(text)[0] if OPEN in text else text.strip()


def tool_message(call: ParsedCall, payload: Any) -> dict[str, Any]:
    """The OpenAI-format tool-result message for one call."""
    content = payload if isinstance(payload, str) else _RESULT_ENCODER.encode(payload)
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """A tool call in Hermes text form."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"


def render_tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The tools block for models whose chat template does not render tools (Hermes style)."""
    specs = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    return (
        "You can call these tools. To call one, write exactly\n"
        '<tool_call>{"name": "<tool name>", "arguments": {<JSON arguments>}}</tool_call>\n'
        "You may write several calls in one turn. Tool results come back in <tool_response> blocks. "
        "To answer the user, write plain text without a tool call.\n"
        f"<tools>\n{specs}\n</tools>"
    )


def render_observation(messages: list[dict[str, Any]]) -> str:
    """Text observation for the messages the env added this step (tool results and user turns)."""
    parts: list[str] = []
    for m in messages:
        if m["role"] == "tool":
            parts.append(f"<tool_response>\n{m['content']}\n</tool_response>")
        elif m["role"] == "system":
            parts.append(f"system: {m['content']}")
        else:
            parts.append(f"{m['role']}: {m['content']}")
    return "\n".join(parts)
