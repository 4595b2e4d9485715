"""The relative judge's prompt and reply: rendering a group of trajectories, and parsing the scores strictly.

Every text of a trajectory (what the agent wrote, tool results, the user's turns) goes through `escape_text` before
it enters the prompt: `&`, `<`, `>`, `[` and `]` become character references. So no text can become a special token
of the judge's chat template (`<|im_start|>` is written `&lt;|im_start|&gt;`), close or open a `<trajectory>`
block, or forge one of the renderer's own line markers (`[tool result ...]`, `[user]`, `[assistant calls ...]`):
those are written by `render_message` alone.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_RUBRIC = "\n".join(
    [
        "- A trajectory that achieves the user's goal scores far above one that does not.",
        "- Among trajectories that achieve the goal, the one with fewer unnecessary or failed tool calls is better.",
        "- Breaking the policy in the system prompt is worse than not acting at all.",
        "- Give partial credit for real progress toward the goal; keep score gaps proportional to quality gaps.",
    ]
)

_SYSTEM_PROMPT = """You are a judge. Every trajectory below was given the same task: the same system prompt \
and the same first user message. Score each trajectory between 0 and 1 by how well it achieves the task, \
comparing the trajectories with each other.

Grading standards:
{rubric}

Reply with only one JSON object and nothing else, with one entry for each of the {n} trajectories \
(trajectory_id 1 to {n}), a one-line explanation and a score between 0 and 1:
{{"scores": [{{"trajectory_id": 1, "explanation": "...", "score": 0.5}}]}}"""

RETRY_PROMPT = (
    "That reply was not valid: {reason}. Reply again with only the JSON object: one entry for each "
    "trajectory_id from 1 to {n}, each with a score between 0 and 1 and a one-line explanation."
)

_MAX_EXPLANATION_CHARS = 300

Message = dict[str, Any]


class JudgeParseError(ValueError):
    """A judge reply that is not the expected score JSON; the message says what was wrong."""


@dataclass(frozen=True)
class TrajectoryScore:
    """The judge's score for one trajectory; `trajectory_id` is its 1-based position in the group."""

    trajectory_id: int
    score: float
    explanation: str


class ScoreItem(BaseModel):
    model_config = ConfigDict(extra="ignore")
    trajectory_id: int
    score: float = Field(ge=0.0, le=1.0, allow_inf_nan=False)
    explanation: str = ""


class _ScoresReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    scores: list[ScoreItem]


def rubric_text(criteria: Sequence[str]) -> str | None:
    """A task's rubric criteria (`TaskSpec.rubric`) as grading standards; None when there are none."""
    lines = [f"- {c.strip()}" for c in criteria if c.strip()]
    return "\n".join(lines) if lines else None


def shared_prefix_length(trajectories: Sequence[Sequence[Message]]) -> int:
    """The number of leading messages equal in every trajectory."""
    if not trajectories:
        return 0
    n = 0
    for column in zip(*trajectories, strict=False):
        if any(m != column[0] for m in column[1:]):
            break
        n += 1
    return n


_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "[": "&#91;", "]": "&#93;"})


def escape_text(text: str) -> str:
    """`text` with the characters that spell special tokens, prompt tags and line markers escaped (see the module
    docstring); reversible, so nothing the judge should read is lost."""
    return text.translate(_ESCAPES)


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def render_message(message: Message) -> str:
    """One message as compact text for the judge: role, content and any tool calls, every text escaped."""
    role = escape_text(str(message.get("role", "?")))
    content = message.get("content")
    text = escape_text(content if isinstance(content, str) else ("" if content is None else json.dumps(content)))
    if role == "tool":
        return f"[tool result {escape_text(str(message.get('name', '')))}] {text}".rstrip()
    calls = message.get("tool_calls") or []
    lines = [f"[{role}] {text}".rstrip()] if text or not calls else []
    for call in calls:
        fn = call.get("function", call) if isinstance(call, dict) else {}
        name, arguments = escape_text(str(fn.get("name", "?"))), escape_text(_arguments_text(fn.get("arguments", {})))
        lines.append(f"[{role} calls {name}] {arguments}")
    return "\n".join(lines)


def render_tools(tools: Sequence[dict[str, Any]]) -> str:
    """Tools as one line each: name(parameters): description."""
    lines = []
    for tool in tools:
        fn = tool.get("function", tool)
        params = ", ".join((fn.get("parameters") or {}).get("properties") or {})
        lines.append(escape_text(f"{fn.get('name', '?')}({params}): {fn.get('description', '')}".rstrip()))
    return "\n".join(lines)


def build_judge_prompt(
    trajectories: Sequence[Sequence[Message]],
    tools: Sequence[dict[str, Any]],
    rubric: str,
    *,
    deduplicate_prefix: bool = True,
) -> list[Message]:
    """The judge's messages: the system prompt, tools and shared prefix once, then each trajectory's own part.

    With `deduplicate_prefix=False` every trajectory is sent whole (the baseline `benchmarks/judge.py` measures).
    """
    n = len(trajectories)
    k = shared_prefix_length(trajectories) if deduplicate_prefix else 0
    parts = []
    if k:
        context = "\n".join(render_message(m) for m in trajectories[0][:k])
        parts.append(f"<context>\n{context}\n</context>")
    if tools:
        parts.append(f"<available_tools>\n{render_tools(tools)}\n</available_tools>")
    parts.append("Trajectories:")
    for i, trajectory in enumerate(trajectories, start=1):
        body = "\n".join(render_message(m) for m in trajectory[k:])
        parts.append(f'<trajectory id="{i}">\n{body}\n</trajectory>')
    return [
        {"role": "system", "content": _SYSTEM_PROMPT.format(rubric=rubric, n=n)},
        {"role": "user", "content": "\n".join(parts)},
    ]


def parse_scores(text: str, n: int) -> list[TrajectoryScore]:
    """The scores in `text`, in trajectory-id order 1..n; raise `JudgeParseError` naming what is wrong.

    The first JSON object in the text is used (models wrap JSON in prose or code fences). Ids must be exactly
    1..n, each once; every score must be a finite number in [0, 1].
    """
    start = text.find("{")
    if start < 0:
        raise JudgeParseError(f"no JSON object in the reply {text[:120]!r}")
    try:
        obj, _ = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as exc:
        raise JudgeParseError(f"malformed JSON ({exc.msg} at char {exc.pos})") from exc
    try:
        reply = _ScoresReply.model_validate(obj)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise JudgeParseError(f"field {where}: {first['msg']}") from exc
    ids = [item.trajectory_id for item in reply.scores]
    expected = set(range(1, n + 1))
    if len(ids) != len(set(ids)) or set(ids) != expected:
        missing = sorted(expected - set(ids))
        extra = sorted({i for i in ids if i not in expected or ids.count(i) > 1})
        raise JudgeParseError(
            f"trajectory ids {ids} are not exactly 1..{n} (missing {missing}, unexpected or repeated {extra})"
        )
    by_id = {item.trajectory_id: item for item in reply.scores}
    return [
        TrajectoryScore(i, by_id[i].score, " ".join(by_id[i].explanation.split())[:_MAX_EXPLANATION_CHARS])
        for i in range(1, n + 1)
    ]


