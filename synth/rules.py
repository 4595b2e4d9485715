"""Grading what the rubric's env components cannot see: exact answers without guess-spraying, and the policy's
rules checked on the trajectory (authenticate before account access, an explicit yes before each write, no write
the task did not ask for).

Components are 0.0 or 1.0 and multiply into the episode's reward, as the env's own do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from envgym.protocol import strip_tool_calls

_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b")
_TIME = re.compile(r"\b\d{1,2}:\d{2}\b")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_ID = re.compile(r"\b[A-Z]{2,5}\d{4}\b")
_YES = re.compile(r"^\W*(yes|go ahead|confirmed|please do)\b", re.IGNORECASE)  # a reply that opens with yes


@dataclass(frozen=True)
class Rules:
    """The policy rules of a synthesized world (what `WorldSpec.rules` holds once the format has it)."""

    authenticate_with: tuple[str, ...]
    requires_auth: tuple[str, ...]
    writes: tuple[str, ...]
    confirm_writes: bool = True
    no_unrequested_writes: bool = True


def _calls(messages: list[dict[str, Any]]) -> list[tuple[int, str, dict[str, Any], str]]:
    """(message index, tool, arguments, outcome: ok | transient | error) for every tool call, in order."""
    results = {m.get("tool_call_id"): m.get("content") or "" for m in messages if m.get("role") == "tool"}
    out = []
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except json.JSONDecodeError:
                args = {}
            content = results.get(call.get("id"), "")
            outcome = "ok" if not content.startswith('{"error"') else \
                "transient" if "temporarily unavailable" in content else "error"
            out.append((i, fn.get("name", ""), args if isinstance(args, dict) else {}, outcome))
    return out


def _canonical(args: dict[str, Any]) -> str:
    return json.dumps(args, sort_keys=True)


def rule_components(messages: list[dict[str, Any]], rules: Rules, solution: list[tuple[str, dict[str, Any]]],
                    answers: list[dict[str, Any]]) -> dict[str, float]:
    """`answers`, `rule_authenticate`, `rule_confirm`, `rule_no_extra_writes` for one finished episode."""
    calls = _calls(messages)
    authed, auth_ok = False, True
    for _, name, _, outcome in calls:
        if name in rules.requires_auth and not authed:
            auth_ok = False
        if name in rules.authenticate_with and outcome == "ok":
            authed = True
    confirm_ok, last_write = True, 0
    for i, name, _, outcome in calls:
        if name in rules.writes:
            said = [m for m in messages[last_write:i]
                    if m.get("role") == "user" and _YES.search(m.get("content") or "")]
            if not said:
                confirm_ok = False
            # A call the service dropped (transient) did not happen: its retry may use the same confirmation.
            if outcome != "transient":
                last_write = i + 1
    expected = [(n, _canonical(a)) for n, a in solution if n in rules.writes]
    extra_ok = True
    for _, name, args, outcome in calls:
        if name in rules.writes and outcome == "ok":
            if (name, _canonical(args)) in expected:
                expected.remove((name, _canonical(args)))
            else:
                extra_ok = False
    return {"answers": float(answers_given(messages, answers)), "rule_authenticate": float(auth_ok),
            "rule_confirm": float(confirm_ok or not rules.confirm_writes),
            "rule_no_extra_writes": float(extra_ok or not rules.no_unrequested_writes)}


def _candidates(text: str, kind: str, choices: list[str]) -> set[str]:
    if kind == "date":
        return set(_DATE.findall(text))
    if kind == "time":
        return set(_TIME.findall(_DATE.sub(" ", text)))
    if kind in ("number", "money"):
        plain = _TIME.sub(" ", _DATE.sub(" ", text))
        return {_number(x) for x in _NUMBER.findall(plain)}
    if kind == "id":
        return set(_ID.findall(text))
    if kind == "enum":
        return {c for c in choices if re.search(rf"(?<![\w-]){re.escape(c)}(?![\w-])", text, re.IGNORECASE)}
    return set()


def _number(text: str) -> str:
    """A number's canonical text: 12.50 -> 12.5, 7.0 -> 7 (exact, unlike %g)."""
    value = round(float(text), 6)
    return str(int(value)) if value.is_integer() else repr(value)


def _norm(value: str, kind: str) -> str:
    return _number(value) if kind in ("number", "money") else value


def _class(kind: str) -> str:
    # Numbers and money are one class: a reply's numbers are all candidates for either.
    return "number" if kind == "money" else kind


def answers_given(messages: list[dict[str, Any]], answers: list[dict[str, Any]]) -> bool:
    """Every answer value was said to the user, and no other candidate of the same type was (no guess-spraying)."""
    said = "\n".join(strip_tool_calls(m.get("content") or "") for m in messages if m.get("role") == "assistant")
    by_kind: dict[str, set[str]] = {}
    for a in answers:
        by_kind.setdefault(_class(a["type"]), set()).add(_norm(a["value"], a["type"]))
    for a in answers:
        kind = a["type"]
        if kind == "text":
            if a["value"] not in said:
                return False
            continue
        found = _candidates(said, kind, a.get("choices") or [])
        if _norm(a["value"], kind) not in found or not found <= by_kind[_class(kind)]:
            return False
    return True
