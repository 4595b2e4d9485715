"""Tool calls in and out, in every format envgym knows: Hermes JSON, Qwen3-Coder XML, pythonic (Llama 3.2/4),
Mistral `[TOOL_CALLS]`, and OpenAI `tool_calls` messages.

`parse_action` turns whatever a policy produced into an OpenAI-format assistant message plus a list of parsed
calls. By default it reads every text format (their markers are distinct); `fmt=` pins one. It never raises: a
call that cannot be parsed becomes a `ParsedCall` with an `error` naming the problem and the format, which the env
answers with a tool error message, so the agent can recover.

A `Renderer` writes calls, tool results and the tools prompt back into text in one format; `renderer(name)` picks
one by name, `detect_format(chat_template)` from the markers in a tokenizer's chat template.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envgym.protocol import hermes, mistral, pythonic, qwen_xml
from envgym.protocol.calls import INVALID_CALL_NAME, ParsedCall, ToolCall, call_from_object, invalid
from envgym.protocol.fastjson import encoder
from envgym.protocol.hermes import CLOSE, OPEN, format_tool_call, split_tool_calls

__all__ = [
    "CLOSE", "FORMATS", "INVALID_CALL_NAME", "OPEN", "ParsedCall", "Renderer", "ToolCall", "detect_format",
    "format_tool_call", "parse_action", "parse_text_calls", "render_observation", "render_tools_prompt",
    "renderer", "split_tool_calls", "strip_tool_calls", "tool_message",
]

FORMATS = (hermes.NAME, qwen_xml.NAME, pythonic.NAME, mistral.NAME)
# One encoder for all tool results: json.dumps builds a new encoder on every call with non-default options.
_encode_result = encoder(ensure_ascii=False, default=str)
_MARKERS = {hermes.NAME: OPEN, qwen_xml.NAME: qwen_xml.FUNCTION, mistral.NAME: mistral.MARKER}


def _block_calls(bodies: list[str], calls: list[ParsedCall], id_prefix: str, allowed: frozenset[str]) -> None:
    """`<tool_call>` bodies: XML when they start with `<function=`, JSON otherwise."""
    for body in bodies:
        xml = qwen_xml.FUNCTION in body and body.lstrip().startswith(qwen_xml.FUNCTION)
        fmt = qwen_xml.NAME if xml else hermes.NAME
        if fmt not in allowed:
            calls.append(_wrong_format(f"{id_prefix}{len(calls)}", body, fmt, allowed))
        elif xml:
            rest = qwen_xml.parse_functions(body, calls, id_prefix)
            if rest:
                calls.append(invalid(f"{id_prefix}{len(calls)}", rest, qwen_xml.NAME,
                                     f"unexpected text {rest[:60]!r} outside <function=...> in a <tool_call> block"))
        else:
            hermes.parse_body(body, calls, id_prefix)


def _wrong_format(call_id: str, raw: str, found: str, allowed: frozenset[str]) -> ParsedCall:
    (pinned,) = allowed
    return invalid(call_id, raw, pinned, f"this environment reads {pinned} tool calls, but the action holds a "
                   f"{found} call; write it as: {renderer(pinned).calls([ToolCall('tool_name', {'arg': 'value'})])}")


def _text_calls(text: str, id_prefix: str, allowed: frozenset[str]) -> tuple[str, list[ParsedCall]]:
    """(text outside the calls, the calls) for every allowed format present in `text`, in a fixed order."""
    if pythonic.NAME in allowed and _is_call_list(text):
        whole: list[ParsedCall] = []
        pythonic.parse(text, whole, id_prefix)
        if whole and all(c.error is None for c in whole):  # markers inside its strings are only text
            return "", whole
    calls: list[ParsedCall] = []
    outside = text
    if mistral.MARKER in outside:
        if mistral.NAME in allowed:
            outside = mistral.parse(outside, calls, id_prefix)
        else:
            calls.append(_wrong_format(f"{id_prefix}{len(calls)}", outside, mistral.NAME, allowed))
    if OPEN in outside:
        outside, bodies = split_tool_calls(outside)
        _block_calls(bodies, calls, id_prefix, allowed)
    if qwen_xml.FUNCTION in outside:  # Qwen3-Coder sometimes drops the <tool_call> wrapper
        if qwen_xml.NAME in allowed:
            outside = qwen_xml.parse_functions(outside, calls, id_prefix)
        else:
            calls.append(_wrong_format(f"{id_prefix}{len(calls)}", outside, qwen_xml.NAME, allowed))
    if not calls and "(" in outside and pythonic.looks_like_calls(outside):
        if pythonic.NAME in allowed:
            outside = pythonic.parse(outside, calls, id_prefix)
        else:
            calls.append(_wrong_format(f"{id_prefix}{len(calls)}", outside, pythonic.NAME, allowed))
    return outside.strip(), calls


def _is_call_list(text: str) -> bool:
    """Whether the whole turn has the shape of one pythonic call list (`[name(...), ...]`)."""
    return text.rstrip().endswith("]") and pythonic.looks_like_calls(text)


def _single_call(text: str, id_prefix: str) -> tuple[str, ParsedCall] | None:
    """The one Hermes call of `text` by the short path (`hermes.parse_single`), when no other format's marker is
    there to read and the turn is not shaped as a pythonic call list; None sends `text` down the general path
    (`_text_calls`), which gives the same result."""
    if mistral.MARKER in text or qwen_xml.FUNCTION in text or _is_call_list(text):
        return None
    return hermes.parse_single(text, id_prefix + "0")


def parse_text_calls(text: str, id_prefix: str, fmt: str | None = None) -> list[ParsedCall]:
    """Every tool call written in `text` (all formats, or only `fmt`)."""
    return _text_calls(text, id_prefix, _allowed(fmt))[1]


def _calls_from_message(message: dict[str, Any], id_prefix: str) -> list[ParsedCall]:
    calls: list[ParsedCall] = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        call_id = f"{id_prefix}{i}"
        if not isinstance(tc, dict):
            calls.append(invalid(call_id, repr(tc)[:200], "openai", "a tool call must be an object"))
            continue
        call_id = str(tc.get("id") or call_id)
        fn = tc.get("function", tc)
        calls.append(call_from_object(fn if isinstance(fn, dict) else None, call_id,
                                      json.dumps(fn, default=str)[:2000], "openai"))
    return calls


_ALL = frozenset(FORMATS)
_RENDERER_FORMATS = {"mistral_v11": mistral.NAME}  # renderer names that read with another format's parser


def _allowed(fmt: str | None) -> frozenset[str]:
    if fmt is None or fmt == "auto":
        return _ALL
    fmt = _RENDERER_FORMATS.get(fmt, fmt)
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}; expected 'auto' or one of {', '.join(FORMATS)}")
    return frozenset((fmt,))


def parse_action(action: Any, id_prefix: str = "call_", fmt: str | None = None) -> tuple[dict[str, Any], list[ParsedCall]]:
    """Normalise an action (text or OpenAI message dict) into (assistant message, parsed calls).

    `fmt` pins one text format (a name in `FORMATS`); None or "auto" reads them all. OpenAI `tool_calls` in a
    message dict are always read.
    """
    allowed = _ALL if fmt is None else _allowed(fmt)
    if isinstance(action, dict):
        content = action.get("content")
        text = content if isinstance(content, str) else ""
        calls = _calls_from_message(action, id_prefix)
        outside = text
        if not calls:
            outside, calls = _text_calls(text, id_prefix, allowed)
    else:
        text = action if isinstance(action, str) else str(action)
        single = _single_call(text, id_prefix) if hermes.NAME in allowed else None
        if single is not None:  # `assistant_message` of the one call, built in place
            outside, call = single
            return {"role": "assistant", "content": outside, "tool_calls": [
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.raw_arguments}}
            ]}, [call]
        outside, calls = _text_calls(text, id_prefix, allowed)
    return assistant_message(text, outside, calls), calls


def assistant_message(text: str, outside: str, calls: list[ParsedCall]) -> dict[str, Any]:
    """The assistant turn for the chat history: the text outside the calls, and the calls in OpenAI form."""
    message: dict[str, Any] = {"role": "assistant", "content": outside if calls else text}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in calls
        ]
    return message


def strip_tool_calls(text: str) -> str:
    """The text of an assistant turn without its tool calls (any format)."""
    return _text_calls(text, "", _ALL)[0]


def tool_message(call: ParsedCall, payload: Any) -> dict[str, Any]:
    """The OpenAI-format tool-result message for one call."""
    content = payload if isinstance(payload, str) else _encode_result(payload)
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


@dataclass(frozen=True)
class Renderer:
    """How one format writes tool calls, tool results and the tools prompt into a model's text."""

    name: str
    calls: Callable[[Sequence[ToolCall]], str]
    result: Callable[[str, str], str]  # (content, call id) -> text
    tools_prompt: Callable[[list[dict[str, Any]]], str]

    def observation(self, messages: list[dict[str, Any]]) -> str:
        """Text observation for the messages the env added this step (tool results and user turns)."""
        parts: list[str] = []
        for m in messages:
            if m["role"] == "tool":
                parts.append(self.result(m["content"], str(m.get("tool_call_id", ""))))
            else:
                parts.append(f"{m['role']}: {m['content']}")
        return "\n".join(parts)


_RENDERERS = {
    r.name: r for r in (
        Renderer(hermes.NAME, hermes.render_calls, hermes.render_result, hermes.tools_prompt),
        Renderer(qwen_xml.NAME, qwen_xml.render_calls, hermes.render_result, qwen_xml.tools_prompt),
        Renderer(pythonic.NAME, pythonic.render_calls, pythonic.render_result, pythonic.tools_prompt),
        Renderer(mistral.NAME, mistral.render_calls, mistral.render_result, mistral.tools_prompt),
        Renderer("mistral_v11", mistral.render_calls_v11, mistral.render_result_v11, mistral.tools_prompt),
    )
}
# Checked in order: Qwen3-Coder's template also holds <tool_call>, and v11 Mistral templates also [TOOL_CALLS].
_TEMPLATE_MARKERS = (
    ("qwen_xml", ("<function=", "<parameter=")),
    ("mistral_v11", ("[ARGS]",)),
    ("mistral", ("[TOOL_CALLS]",)),
    ("hermes", ("<tool_call>",)),
    ("pythonic", ("[func_name1(", "<|python_start|>")),
)


def renderer(name: str | None = None) -> Renderer:
    """The renderer called `name` (Hermes when None or "auto")."""
    if name is None or name == "auto":
        return _RENDERERS[hermes.NAME]
    try:
        return _RENDERERS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call format {name!r}; expected one of {', '.join(_RENDERERS)}") from None


def detect_format(chat_template: str | None) -> str:
    """The renderer name whose markers a tokenizer's chat template holds; "hermes" when none match."""
    template = chat_template or ""
    for name, markers in _TEMPLATE_MARKERS:
        if any(m in template for m in markers):
            return name
    return hermes.NAME


def render_tools_prompt(tools: list[dict[str, Any]]) -> str:
    """The Hermes tools block for models whose chat template does not render tools."""
    return hermes.tools_prompt(tools)


def render_observation(messages: list[dict[str, Any]]) -> str:
    """Text observation (Hermes `<tool_response>` blocks) for the messages the env added this step."""
    return _RENDERERS[hermes.NAME].observation(messages)
