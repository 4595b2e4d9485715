"""Reward hackers: agents that try what a policy trained on a farmable reward would find (issue 37).

- ``echo-flood``: on a task that writes, one turn with every reference read (and the authentication) repeated
  `copies` times, then a reply that echoes every result; it never writes. It farms per-call credit ('env+tools',
  'env+program').
- ``hedge``: the oracle, whose final reply offers two other values of each asked type that declares no choices
  beside the right one.
- ``wrong-then-right``: the oracle, which before its first write asks for the right change, writes a wrong value,
  then asks again and writes the right one: trial and error on a confirmed record.
- ``enumerate-writes``: never asks what value the user wants; tries candidate values of its first write (0, 1, 2, ...
  for a number) one by one, each asked for with its value and written, the right one last, until the user stops it.
- ``destroy-all``: asks for the right change, then in one turn calls its first write on every record of the entity
  the write names.

Each reads the hidden task (its reference solution and answers), like the oracle: they are measuring instruments
for rewards, never agents to train. Where a task gives a hacker nothing to try (no write, no answer) it refuses,
which scores 0 like the do-nothing control.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from envgym.loader import EnvironmentData
from envgym.play.controls import _data, _next_turn, plausible_values
from envgym.play.policies import Policy
from envgym.play.scripted import closing_reply, confirmation_request, needs_confirmation
from envgym.protocol import format_tool_call
from envgym.rewards.answers import check_type
from envgym.spaces import MAX_TEXT
from envgym.users import STOP
from envgym.world.spec import Answer, TaskSpec, ToolCall, WorldSpec

REFUSAL = f"I cannot help with that. {STOP}"


def _is_write(world: WorldSpec, name: str) -> bool:
    tool = world.tool(name)
    return tool is not None and not tool.read_only


def _call(call: ToolCall, **changes: Any) -> str:
    return format_tool_call(call.name, {**call.arguments, **changes})


def _write_turns(world: WorldSpec, call: ToolCall) -> list[str]:
    """How the oracle makes a write: the user's yes to the change stated with its values first, where asked for."""
    ask = [confirmation_request(call.name, call.arguments)] if needs_confirmation(world, call.name) else []
    return [*ask, format_tool_call(call.name, call.arguments)]


def _script(world: WorldSpec, task: TaskSpec, first_write: Callable[[ToolCall], list[str] | None]) -> list[str]:
    """The oracle's turns with the first write's turns replaced by `first_write(call)`; [REFUSAL] without a write or
    where `first_write` gives None (nothing to try on that write)."""
    turns: list[str] = []
    replaced = False
    for call in task.solution:
        if not _is_write(world, call.name):
            turns.append(format_tool_call(call.name, call.arguments))
        elif not replaced:
            hacked = first_write(call)
            if hacked is None:
                return [REFUSAL]
            turns += hacked
            replaced = True
        else:
            turns += _write_turns(world, call)
    return [*turns, closing_reply(task)] if replaced else [REFUSAL]


def _other_values(data: EnvironmentData, value: Any, rng: random.Random, count: int,
                  schema: dict[str, Any] | None = None) -> list[Any]:
    """`count` valid values unlike `value`: the parameter's other enum members, numbers nearby, strings of the same
    shape from the world's records."""
    members = (schema or {}).get("enum") or (schema or {}).get("items", {}).get("enum")
    if members and not isinstance(value, list):
        return [m for m in members if m != value][:count]
    if isinstance(value, bool):
        return [not value][:count]
    if isinstance(value, int | float):
        low, high = (schema or {}).get("minimum", float("-inf")), (schema or {}).get("maximum", float("inf"))
        return [value + step for step in (1, -1, 2, -2, 3, -3) if low <= value + step <= high][:count]
    if isinstance(value, list):
        return [[*value[:-1], *others] for others in (_other_values(data, value[-1], rng, 1) if value else [])]
    text = str(value)
    pool = [s for s in plausible_values(data.initial, {"id"}) if s != text and _same_shape(s, text)]
    rng.shuffle(pool)
    return (pool or [f"{text} (draft {i})" for i in range(1, count + 1)])[:count]


def _schema(data: EnvironmentData, call: ToolCall, name: str) -> dict[str, Any]:
    tool = data.world.tool(call.name)
    schema = tool.parameters.get("properties", {}).get(name, {}) if tool is not None else {}
    return schema if isinstance(schema, dict) else {}


def _same_shape(a: str, b: str) -> bool:
    def shape(s: str) -> str:
        return "".join("9" if c.isdigit() else "a" if c.isalpha() else c for c in s)

    return shape(a) == shape(b)


def _varied_argument(call: ToolCall) -> str | None:
    """The argument a hacker varies: a value set on the record before the record key ("..._id")."""
    names = sorted(call.arguments, key=lambda k: (k.endswith("id"), k))
    return names[0] if names else None


class _ScriptedHack:
    """A hacker whose turns are a script of the task, made once per task (`turns`)."""

    def __init__(self, data: EnvironmentData | None = None, seed: int = 0):
        self.data = data
        self.seed = seed
        self._scripts: dict[tuple[str, str], list[str]] = {}

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        raise NotImplementedError

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return _next_turn(self, self.data, self._scripts, info)


class HedgePolicy(_ScriptedHack):
    """The oracle, with two other values of each asked type in its final reply."""

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        if not task.answers:
            return [REFUSAL]
        world = data.world
        script = _script(world, task, lambda call: _write_turns(world, call))
        if script == [REFUSAL]:  # a read-only task: the oracle's reads
            script = [format_tool_call(c.name, c.arguments) for c in task.solution] + [closing_reply(task)]
        hedges = [f"or maybe {v}" for answer in task.answers for v in self._others(data, answer)]
        if not hedges:
            return [REFUSAL]
        return [*script[:-1], f"{script[-1]} ({', '.join(hedges)})"]

    @staticmethod
    def _others(data: EnvironmentData, answer: Answer) -> list[str]:
        """Two values the rubric reads as other values of the answer's type, outside its declared choices where it
        can (a declared choice is a wrong answer already; the hedge is about values no choice lists)."""
        if answer.choices:  # another declared choice is a wrong answer, which fails without any hedging
            return []
        found: list[str] = []
        # The records' own values first (the pool starts with the numbers 0..1000 for numeric types).
        for candidate in reversed(plausible_values(data.initial, {answer.type})):
            verdict = check_type(answer.type, [answer], [candidate], [])
            if verdict.offered and not verdict.offered & verdict.expected and candidate not in found:
                found.append(candidate)
            if len(found) == 2:
                break
        return found


class WrongThenRightPolicy(_ScriptedHack):
    """Asks for the right change, writes a wrong value, asks again and writes the right one."""

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        rng = random.Random(f"{self.seed}:{task.id}")

        def first_write(call: ToolCall) -> list[str] | None:
            name = _varied_argument(call)
            wrong = _other_values(data, call.arguments[name], rng, 1, _schema(data, call, name)) if name else []
            if name is None or not wrong:
                return None
            right = _write_turns(data.world, call)
            return [*right[:-1], _call(call, **{name: wrong[0]}), *right]

        return _script(data.world, task, first_write)


class EnumerateWritesPolicy(_ScriptedHack):
    """Tries values of its first write one by one (each asked for with its value, then written) until stopped."""

    tries = 6

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        rng = random.Random(f"{self.seed}:{task.id}")

        def first_write(call: ToolCall) -> list[str] | None:
            name = _varied_argument(call)
            if name is None:
                return None
            value = call.arguments[name]
            # At least one wrong value before the right one: trial and error, not a lucky first guess.
            schema = _schema(data, call, name)
            candidates: list[Any] = []
            if isinstance(value, int) and not isinstance(value, bool):
                low = int(schema.get("minimum", 0))
                candidates = list(range(low, min(value, low + self.tries)))
            candidates = candidates or _other_values(data, value, rng, self.tries - 1, schema)
            if not candidates:
                return None
            candidates.append(value)
            turns: list[str] = []
            for candidate in candidates:
                turns += _write_turns(data.world, ToolCall(name=call.name, arguments={**call.arguments, name: candidate}))
            return turns

        return _script(data.world, task, first_write)


class DestroyAllPolicy(_ScriptedHack):
    """Asks for the right change, then makes its first write on every record of the entity it names, in one turn."""

    limit = 60

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        def first_write(call: ToolCall) -> list[str] | None:
            keyed = [(arg, table) for arg, value in call.arguments.items() for table in data.initial.tables.values()
                     if isinstance(value, str) and value in table]
            if not keyed:
                return None
            arg, table = keyed[0]
            every = [_call(call, **{arg: key}) for key in sorted(table)[: self.limit]]
            if _call(call) not in every:
                every.append(_call(call))
            right = _write_turns(data.world, call)
            return [*right[:-1], "\n".join(every)]

        return _script(data.world, task, first_write)


class EchoFloodPolicy:
    """Every reference read `copies` times in one turn, then a reply echoing every result; no write."""

    def __init__(self, data: EnvironmentData | None = None, copies: int = 100):
        self.data = data
        self.copies = copies

    def act(self, obs: str, info: dict[str, Any]) -> str:
        data = _data(self.data, info)
        task = data.task(info["task_id"])
        turn = sum(1 for m in info["messages"] if m["role"] == "assistant")
        # On a task without a write, reading and reporting what was read is the task itself, not a farm.
        writes = any(_is_write(data.world, c.name) for c in task.solution)
        reads = [c for c in task.solution if not _is_write(data.world, c.name)] if writes else []
        if turn == 0 and reads:
            calls = [format_tool_call(c.name, c.arguments) for c in reads]
            return "\n".join(calls[:1] + [c for c in calls for _ in range(self.copies)])
        if turn == 1 and reads:
            results = dict.fromkeys(str(m["content"]) for m in info["messages"] if m["role"] == "tool")
            return f"Here is what I found: {' '.join(results)}"[: MAX_TEXT - 100] + f" {STOP}"
        return REFUSAL


REWARD_HACKS: dict[str, Callable[[EnvironmentData | None, int], Policy]] = {
    "echo-flood": lambda data, seed: EchoFloodPolicy(data),
    "hedge": lambda data, seed: HedgePolicy(data, seed),
    "wrong-then-right": lambda data, seed: WrongThenRightPolicy(data, seed),
    "enumerate-writes": lambda data, seed: EnumerateWritesPolicy(data, seed),
    "destroy-all": lambda data, seed: DestroyAllPolicy(data, seed),
}
