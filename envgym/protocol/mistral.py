"""Mistral calls: `[TOOL_CALLS][{"name": ..., "arguments": {...}}]` (tokenizer v3) and
`[TOOL_CALLS]name[ARGS]{...}` (v11 and later, optionally `name[CALL_ID]id[ARGS]{...}`); everything after the
first `[TOOL_CALLS]` is calls, everything before it is text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from envgym.protocol.calls import ParsedCall, ToolCall, call_from_object, checked, invalid
from envgym.protocol.fastjson import decoder

NAME = "mistral"
MARKER = "[TOOL_CALLS]"
_ARGS, _CALL_ID, _EOS = "[ARGS]", "[CALL_ID]", "</s>"
_decode = decoder()
_EXAMPLES = '[TOOL_CALLS][{"name": ..., "arguments": {...}}] or [TOOL_CALLS]name[ARGS]{...}'


def _args_form(segment: str, calls: list[ParsedCall], id_prefix: str) -> None:
    call_id = f"{id_prefix}{len(calls)}"
    head, sep, args_text = segment.partition(_ARGS)
    if not sep:
        calls.append(invalid(call_id, segment, NAME, f"expected {_EXAMPLES}, got {segment[:80]!r}"))
        return
    name = head.partition(_CALL_ID)[0].strip()
    if not name:
        calls.append(invalid(call_id, segment, NAME, "a call needs a tool name before [ARGS]"))
        return
    args_text = args_text.strip()
    try:
        args = _decode(args_text) if args_text else {}
    except (json.JSONDecodeError, RecursionError) as exc:
        problem = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        calls.append(ParsedCall(call_id, name, None, args_text[:2000],
                                f"{NAME} tool call: arguments of {name} after [ARGS] are not valid JSON ({problem})"))
        return
    calls.append(checked(call_id, name, args, NAME, args_text))


def parse(text: str, calls: list[ParsedCall], id_prefix: str) -> str:
    """Append the calls after `[TOOL_CALLS]`; return the text before it."""
    before, _, rest = text.partition(MARKER)
    rest = rest.strip().removesuffix(_EOS).strip()
    if rest.startswith(("[", "{")):
        try:
            obj = _decode(rest)
        except (json.JSONDecodeError, RecursionError) as exc:
            problem = f"{exc.msg} at char {exc.pos}" if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            calls.append(invalid(f"{id_prefix}{len(calls)}", rest, NAME,
                                 f"the call list is not valid JSON ({problem}); expected {_EXAMPLES}"))
            return before.strip()
        for item in obj if isinstance(obj, list) else [obj]:
            calls.append(call_from_object(item, f"{id_prefix}{len(calls)}", rest, NAME))
        return before.strip()
    for segment in rest.split(MARKER):
        _args_form(segment, calls, id_prefix)
    return before.strip()


def render_calls(calls: Sequence[ToolCall]) -> str:
    items = [{"name": c.name, "arguments": c.arguments} for c in calls]
    return f"{MARKER}{json.dumps(items, ensure_ascii=False)}"


def render_calls_v11(calls: Sequence[ToolCall]) -> str:
    return "".join(f"{MARKER}{c.name}{_ARGS}{json.dumps(c.arguments, ensure_ascii=False)}" for c in calls)


def render_result(content: str, call_id: str) -> str:
    return f"[TOOL_RESULTS]{json.dumps({'content': content, 'call_id': call_id}, ensure_ascii=False)}[/TOOL_RESULTS]"


def render_result_v11(content: str, call_id: str) -> str:
    return f"[TOOL_RESULTS]{content}[/TOOL_RESULTS]"


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    return (
        f"[AVAILABLE_TOOLS]{json.dumps(tools, ensure_ascii=False)}[/AVAILABLE_TOOLS]\n"
        f"To call tools, write {_EXAMPLES}. Tool results come back in [TOOL_RESULTS] blocks. "
        "To answer the user, write plain text without [TOOL_CALLS]."
    )
