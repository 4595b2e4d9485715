"""BFCL's ground truth as envgym actions, and the oracle policy that plays it (a measuring instrument: it reads
the ground truth, so it proves the env grades as BFCL does and is never an agent to evaluate).

Multi-turn: each turn's ground-truth calls in one action (positional arguments named by the backend method's
signature), then a plain reply that ends the turn; a turn whose ground truth is empty (the model should ask for
the missing function or parameter) is a plain reply. Single-turn: one action with every ground-truth call, each
parameter given its first possible value other than "" (a parameter with no other value is left out).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
from typing import Any

from envgym.integrations.bfcl import data
from envgym.integrations.bfcl.calls import parse_call_string
from envgym.protocol import format_tool_call

END_OF_TURN = "Done."
CANNOT = "I cannot do that with the functions and information I have."


@functools.cache
def _method_signatures(classes: tuple[str, ...]) -> dict[str, inspect.Signature]:
    data.bfcl()
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    out: dict[str, inspect.Signature] = {}
    for class_name in classes:
        cls = getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name]), class_name)
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if not name.startswith("_"):
                out[name] = inspect.signature(fn)
    return out


def multi_turn_calls(task_id: str, ground_truth: list[list[str]] | None = None) -> list[list[tuple[str, dict[str, Any]]]]:
    """Per turn, the (name, keyword arguments) of `ground_truth` (default: BFCL's) for multi-turn task `task_id`."""
    entry = data.entry(task_id)
    signatures = _method_signatures(tuple(entry["involved_classes"]))
    turns = data.ground_truth(task_id) if ground_truth is None else ground_truth
    return [[parse_call_string(call, signatures.get) for call in turn] for turn in turns]


def multi_turn_actions(turns: list[list[tuple[str, dict[str, Any]]]]) -> list[str]:
    """The actions that play `turns` of calls through `envgym/bfcl-multi-turn-v0`."""
    actions: list[str] = []
    for calls in turns:
        if calls:
            actions.append("\n".join(format_tool_call(name, args) for name, args in calls))
            actions.append(END_OF_TURN)
        else:
            actions.append(CANNOT)
    return actions


_OMIT = object()


def _pick(possible: Any) -> Any:
    """The first of a list of possible values other than "" (which marks a value that may be left out); _OMIT
    when there is none. A concrete value, even for an optional parameter: some docs require what the answers
    mark optional."""
    if not isinstance(possible, list):
        return possible
    return next((v for v in possible if v != ""), _OMIT)


def _entries(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in ((k, _pick(p)) for k, p in value.items()) if v is not _OMIT}


def _concrete(value: Any) -> Any:
    """One value for a parameter's chosen possible answer: a dict's keys (or each dict's in a list of dicts) map
    to lists of possible values one level deep, as BFCL's dict checker reads them."""
    if isinstance(value, dict):
        return _entries(value)
    if isinstance(value, list) and value and all(isinstance(x, dict) for x in value):
        return [_entries(x) for x in value]
    return value


def _source_text(value: Any) -> str:
    """A value as Java or JavaScript source text (the string form those categories' parameters take)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value)


def single_turn_calls(task_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The (tool name, arguments) of one answer BFCL's possible answers allow for single-turn task `task_id`.
    A live_relevance entry has no possible answer (any call is relevant): its first function, no arguments."""
    category = data.category_of(task_id)
    if category == "live_relevance":
        return [(data.openai_name(data.entry(task_id)["function"][0]["name"]), {})]
    as_text = "java" in category  # Java and JavaScript parameters are strings of source text
    docs = {d["name"]: d for d in data.entry(task_id, for_checker=True)["function"]}
    calls = []
    for call in data.ground_truth(task_id) or []:
        ((name, params),) = call.items()
        known = (docs.get(name) or {}).get("parameters", {}).get("properties", {})
        # A parameter the doc does not have is left out where the answer allows it.
        kept = {k: p for k, p in params.items() if k in known or not (isinstance(p, list) and "" in p)}
        args = {k: _concrete(v) for k, v in ((k, _pick(p)) for k, p in kept.items()) if v is not _OMIT}
        calls.append((data.openai_name(name), {k: _source_text(v) for k, v in args.items()} if as_text else args))
    return calls


def single_turn_action(task_id: str) -> str:
    """The action that answers single-turn task `task_id` with `single_turn_calls` (a live_relevance entry, which
    has no possible answer, gets no action that BFCL would accept: a reply)."""
    calls = single_turn_calls(task_id)
    if not calls:
        return CANNOT
    return "\n".join(format_tool_call(name, args) for name, args in calls)


class BfclOraclePolicy:
    """Plays BFCL's ground truth of the episode's task (`info["task_id"]`), one action per step."""

    def __init__(self) -> None:
        self._plan: list[str] = []
        self._task: str | None = None

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if info.get("step", 0) == 0 or info["task_id"] != self._task:
            task_id = str(info["task_id"])
            self._task = task_id
            if data.category_of(task_id) in data.MULTI_TURN_CATEGORIES:
                self._plan = multi_turn_actions(multi_turn_calls(task_id))
            else:
                self._plan = [single_turn_action(task_id)]
        return self._plan.pop(0) if self._plan else CANNOT
