"""Pythonic calls (Llama 3.2 / Llama 4): `[get_weather(city="Paris"), f(x=1)]` as the whole turn.

Read with `ast`, never evaluated: arguments must be literals (strings, numbers, booleans, None, lists, tuples and
dicts of them). JSON spellings `true`, `false` and `null` are accepted because models write them.
"""

from __future__ import annotations

import ast
import keyword
import math
import re
from collections.abc import Sequence
from typing import Any

from envgym.protocol.calls import ParsedCall, ToolCall, checked, invalid, tool_lines

NAME = "pythonic"
_LLAMA4_TAGS = ("<|python_start|>", "<|python_end|>")
# A turn is an attempted call list when it is `[name(` ... `]`; any other text is a reply to the user.
_LOOKS_LIKE_CALLS = re.compile(r"\[\s*[A-Za-z_][\w.]*\s*\(")
_JSON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_EXAMPLE = '[tool_name(arg="value", other=1), other_tool()]'


class _NotLiteral(ValueError):
    pass


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, str | int | float | bool)):
        return node.value
    if isinstance(node, ast.List | ast.Tuple):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for k, v in zip(node.keys, node.values, strict=True):
            if k is None:
                raise _NotLiteral("** inside a dict literal")
            key = _literal(k)
            if not isinstance(key, str):
                raise _NotLiteral(f"dict key {key!r} (JSON keys are strings)")
            out[key] = _literal(v)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _literal(node.operand)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise _NotLiteral(type(node).__name__)


def _call(node: ast.expr, call_id: str, source: str) -> ParsedCall:
    raw = (ast.get_source_segment(source, node) or "")[:2000]
    if not isinstance(node, ast.Call):
        return invalid(call_id, raw, NAME, f"each item of the list must be a call like {_EXAMPLE}, got {raw[:80]!r}")
    name = ast.unparse(node.func) if isinstance(node.func, ast.Name | ast.Attribute) else ""
    if not name:
        return invalid(call_id, raw, NAME, f"a call must start with a tool name, got {raw[:80]!r}")
    if node.args:
        return ParsedCall(call_id, name, None, raw, f"{NAME} tool call: {name} takes keyword arguments only "
                          f"(write {name}(arg=value)), got a positional argument")
    args: dict[str, Any] = {}
    for kw in node.keywords:
        try:
            value = _literal(kw.value)
        except (_NotLiteral, RecursionError) as exc:
            what = kw.arg or "**"
            return ParsedCall(call_id, name, None, raw,
                              f"{NAME} tool call: argument {what} of {name} must be a literal, got {exc}")
        if kw.arg is not None:
            args[kw.arg] = value
        elif isinstance(value, dict):  # **{"from": ...} carries names that are Python keywords
            args.update(value)
        else:
            return ParsedCall(call_id, name, None, raw, f"{NAME} tool call: ** in {name} needs a dict literal")
    return checked(call_id, name, args, NAME)


def looks_like_calls(text: str) -> bool:
    body = text.strip()
    for tag in _LLAMA4_TAGS:
        body = body.replace(tag, "")
    body = body.strip()
    return body.endswith("]") and _LOOKS_LIKE_CALLS.match(body) is not None


def parse(text: str, calls: list[ParsedCall], id_prefix: str) -> str:
    """Append the calls of a turn that is one pythonic call list; return the remaining text ("" when parsed)."""
    if not looks_like_calls(text):
        return text
    body = text.strip()
    for tag in _LLAMA4_TAGS:
        body = body.replace(tag, "")
    body = body.strip()
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        detail = exc.msg if isinstance(exc, SyntaxError) else type(exc).__name__
        calls.append(invalid(f"{id_prefix}{len(calls)}", body, NAME,
                             f"the call list is not valid Python syntax ({detail}); expected {_EXAMPLE}"))
        return ""
    if not isinstance(tree.body, ast.List):
        calls.append(invalid(f"{id_prefix}{len(calls)}", body, NAME, f"expected a list of calls like {_EXAMPLE}"))
        return ""
    for node in tree.body.elts:
        calls.append(_call(node, f"{id_prefix}{len(calls)}", body))
    return ""


def _py(value: Any) -> str:
    """A Python literal for a JSON value (repr would write floats and strings the same way)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_py(k)}: {_py(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_py(v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{value!r} has no literal form in a pythonic call")
    return repr(value)


def render_calls(calls: Sequence[ToolCall]) -> str:
    parts = []
    for call in calls:
        if not call.name.isidentifier() or keyword.iskeyword(call.name):
            raise ValueError(f"tool name {call.name!r} cannot be written as a pythonic call")
        named = [f"{k}={_py(v)}" for k, v in call.arguments.items() if k.isidentifier() and not keyword.iskeyword(k)]
        rest = {k: v for k, v in call.arguments.items() if not k.isidentifier() or keyword.iskeyword(k)}
        if rest:
            named.append(f"**{_py(rest)}")
        parts.append(f"{call.name}({', '.join(named)})")
    return f"[{', '.join(parts)}]"


def render_result(content: str, call_id: str) -> str:
    return f"ipython: {content}"  # Llama templates give tool output the ipython role


def tools_prompt(tools: list[dict[str, Any]]) -> str:
    return (
        "You can call these tools. To call them, answer with only a list of calls in Python syntax, e.g.\n"
        f"{_EXAMPLE}\n"
        "with keyword arguments whose values are literals. Tool results come back as ipython messages. To answer "
        f"the user, write plain text.\nTools:\n{tool_lines(tools)}"
    )
