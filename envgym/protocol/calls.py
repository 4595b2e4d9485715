"""The records every tool-call format parses into and renders from, and the checks they share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii as _quote
from typing import Any

from envgym.protocol.fastjson import encoder

INVALID_CALL_NAME = "invalid_tool_call"
_encode = encoder()


def encode_arguments(args: Any) -> str:
    """`json.dumps(args)`: the arguments' canonical text (`raw_arguments`). Most arguments are a few strings, which
    are written here directly: for those the C encoder's set-up costs more than the text."""
    if type(args) is dict:
        parts = []
        for key, value in args.items():
            if type(key) is not str or type(value) is not str:
                return _encode(args)
            parts.append(f"{_quote(key)}: {_quote(value)}")
        return "{" + ", ".join(parts) + "}"
    return _encode(args)


@dataclass(slots=True)
class ParsedCall:
    """One tool call taken from an action; `error` says why it cannot be executed (then name may be a guess)."""

    id: str
    name: str
    arguments: Any
    raw_arguments: str
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call to render: a tool name and its JSON arguments (an object; a string that did not decode is kept)."""

    name: str
    arguments: Any


def invalid(call_id: str, raw: str, fmt: str, problem: str) -> ParsedCall:
    """A call that could not be read at all; the error names the format so the agent can fix its syntax."""
    return ParsedCall(call_id, INVALID_CALL_NAME, None, raw[:2000], f"{fmt} tool call: {problem}")


def checked(call_id: str, name: str, args: Any, fmt: str, raw_args: str | None = None) -> ParsedCall:
    """A call with a name and decoded arguments, or an error saying which of the two is wrong."""
    if not isinstance(name, str) or not name:
        return invalid(call_id, raw_args or "", fmt, "a tool call needs a non-empty string name")
    if args is None:
        args = {}
    if raw_args is None:
        try:
            raw_args = encode_arguments(args)
        except RecursionError:  # decoded within the limit, but its canonical text would nest deeper
            return ParsedCall(call_id, name, None, "", f"{fmt} tool call: the arguments of {name} are nested too deeply")
    if not isinstance(args, dict):
        return ParsedCall(call_id, name, None, raw_args,
                          f"{fmt} tool call: the arguments of {name} must be a JSON object, got {type(args).__name__}")
    return ParsedCall(call_id, name, args, raw_args)


def call_from_object(obj: Any, call_id: str, raw: str, fmt: str) -> ParsedCall:
    """A call from a decoded `{"name": ..., "arguments": {...}}` object (arguments may be a JSON string)."""
    if not isinstance(obj, dict):
        return invalid(call_id, raw, fmt, f"a tool call must be a JSON object, got {raw[:80]!r}")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return invalid(call_id, raw, fmt, 'a tool call needs a string "name" field')
    args = obj["arguments"] if "arguments" in obj else obj.get("parameters", {})
    if isinstance(args, str):
        try:
            decoded = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            return ParsedCall(call_id, name, None, args,
                              f"{fmt} tool call: arguments of {name} are not valid JSON: {exc.msg}")
        return checked(call_id, name, decoded, fmt, args)
    return checked(call_id, name, args, fmt)


def tool_lines(tools: list[dict[str, Any]]) -> str:
    """The tool schemas for a tools prompt, one JSON object a line."""
    return "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
