"""The reflector: a chat model reads failing trajectories and answers with a critique and an edit.

Two reply shapes, both a JSON object (bare or in a ```json fence):
- prompt mode (GEPA): `{"critique": "...", "prompt": "<the whole new system prompt>"}`;
- playbook mode (ACE): `{"critique": "...", "operations": [{"op": "add", "text": ...}, {"op": "refine", "id": ...,
  "text": ...}, {"op": "remove", "id": ...}], "helpful": [ids], "harmful": [ids]}`.
A reply that does not parse or does not fit raises `ReflectionRejected` naming the problem; the optimizer logs it
and goes on, so a bad reflector never ends a run.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from envgym.llm.base import ChatModel
from envgym.optimize.candidates import OP_KINDS, Candidate, PlaybookOp
from envgym.play.episode import Trajectory
from envgym.play.eval import failure_of

MAX_PROMPT_CHARS = 4000
TRANSCRIPT_CHARS = 900
_FENCE = re.compile(r"```(?:json)?\s*\n(.*?)```", re.DOTALL)

PROMPT_INSTRUCTIONS = (
    "You improve the system prompt of a tool-using assistant. Read the failed conversations, say in one or two "
    "sentences what went wrong, then write the whole improved system prompt. Answer with one JSON object only: "
    '{"critique": "...", "prompt": "..."}'
)
PLAYBOOK_INSTRUCTIONS = (
    "You keep a playbook of short lessons for a tool-using assistant. Read the failed conversations, say in one or "
    "two sentences what went wrong, then change the playbook one item at a time. Answer with one JSON object only: "
    '{"critique": "...", "operations": [{"op": "add", "text": "..."}, {"op": "refine", "id": "p1", "text": "..."}, '
    '{"op": "remove", "id": "p2"}], "helpful": ["p1"], "harmful": []}'
)


class ReflectionRejected(ValueError):
    """The reflector's reply could not be used; the message says why (and shows the start of the reply)."""


@dataclass(frozen=True)
class Reflection:
    """A usable reply: the critique and either a new prompt or playbook operations with votes."""

    critique: str
    prompt: str | None = None
    ops: tuple[PlaybookOp, ...] = ()
    helpful: tuple[str, ...] = ()
    harmful: tuple[str, ...] = ()
    raw: str = field(default="", repr=False)


def transcript(t: Trajectory, limit: int = TRANSCRIPT_CHARS) -> str:
    """The conversation after the system message, one `role: text` line each, cut to `limit` characters."""
    lines = []
    for m in t.messages[1:]:
        text = m.get("content") or ""
        for call in m.get("tool_calls") or []:
            fn = call.get("function", call)
            text += f" [call {fn.get('name')}({fn.get('arguments')})]"
        lines.append(f"{m['role']}: {text.strip()}")
    body = "\n".join(lines)
    return body if len(body) <= limit else body[: limit - 3] + "..."


def reflection_messages(parent: Candidate, failures: list[Trajectory], *, playbook: bool) -> list[dict[str, Any]]:
    """The chat the reflector answers: what to do, the current prompt or playbook, and each failed episode."""
    shown = (parent.system_text() if playbook else parent.prompt)
    parts = [f"Current {'system prompt with playbook' if playbook else 'system prompt'}:\n{shown}"]
    for number, t in enumerate(failures, start=1):
        parts.append(f"Failed conversation {number} (task {t.task_id}, reward {t.reward:.2f}, "
                     f"failure {failure_of(t)}):\n{transcript(t)}")
    return [{"role": "system", "content": PLAYBOOK_INSTRUCTIONS if playbook else PROMPT_INSTRUCTIONS},
            {"role": "user", "content": "\n\n".join(parts)}]


def _json_object(text: str) -> dict[str, Any]:
    fenced = _FENCE.search(text)
    start, end = text.find("{"), text.rfind("}")
    body = fenced.group(1) if fenced else text[start: end + 1 if end > start else len(text)] if start >= 0 else ""
    if not body.strip():
        raise ReflectionRejected(f"the reply holds no JSON object: {text[:120]!r}")
    try:
        value = json.loads(body)
    except json.JSONDecodeError as exc:
        raise ReflectionRejected(f"the reply's JSON does not parse ({exc.msg} at character {exc.pos}): "
                                 f"{body[:120]!r}") from None
    if not isinstance(value, dict):
        raise ReflectionRejected(f"the reply's JSON is a {type(value).__name__}, not an object")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ReflectionRejected(f"{key!r} must be a list of item ids, got {value!r}")
    return tuple(value)


def _op(number: int, raw: Any) -> PlaybookOp:
    if not isinstance(raw, dict):
        raise ReflectionRejected(f"operation {number} is not an object: {raw!r}")
    kind = raw.get("op")
    if kind not in OP_KINDS:
        raise ReflectionRejected(f"operation {number}: 'op' must be one of {list(OP_KINDS)}, got {kind!r}")
    item_id, text = raw.get("id"), raw.get("text")
    if kind in ("refine", "remove") and not isinstance(item_id, str):
        raise ReflectionRejected(f"operation {number} ({kind}) needs an item 'id' string")
    if kind in ("add", "refine") and not isinstance(text, str):
        raise ReflectionRejected(f"operation {number} ({kind}) needs a 'text' string")
    return PlaybookOp(kind, item_id if kind != "add" else None, text if kind != "remove" else None)


def parse_reflection(text: str, *, playbook: bool) -> Reflection:
    """The reflector's reply as a `Reflection`, or `ReflectionRejected` naming what is missing or malformed."""
    value = _json_object(text)
    critique = value.get("critique", "")
    if not isinstance(critique, str):
        raise ReflectionRejected(f"'critique' must be a string, got {critique!r}")
    if not playbook:
        prompt = value.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise ReflectionRejected("the reply has no non-empty 'prompt' string")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ReflectionRejected(f"the new prompt has {len(prompt)} characters, more than {MAX_PROMPT_CHARS}")
        return Reflection(critique.strip(), prompt=prompt.strip(), raw=text)
    ops = value.get("operations")
    if not isinstance(ops, list) or not ops:
        raise ReflectionRejected("the reply has no non-empty 'operations' list")
    return Reflection(critique.strip(), ops=tuple(_op(n, op) for n, op in enumerate(ops, start=1)),
                      helpful=_strings(value.get("helpful"), "helpful"),
                      harmful=_strings(value.get("harmful"), "harmful"), raw=text)


class Reflector:
    """Asks `model` for a reflection on a parent candidate's failures (greedy, so a recorded run replays)."""

    def __init__(self, model: ChatModel, *, playbook: bool = False, max_tokens: int = 384):
        self.model = model
        self.playbook = playbook
        self.max_tokens = max_tokens

    def reflect(self, parent: Candidate, failures: list[Trajectory]) -> Reflection:
        reply = self.model.chat(reflection_messages(parent, failures, playbook=self.playbook),
                                max_tokens=self.max_tokens, temperature=0.0)
        return parse_reflection(reply.text, playbook=self.playbook)
