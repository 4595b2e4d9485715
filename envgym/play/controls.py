"""Negative controls: agents that must score 0 on a task whose rubric holds.

- ``do-nothing``: `RefusePolicy`, refuses every turn.
- ``random``: `RandomPolicy`, random tools with random schema-typed arguments.
- ``guess-spray``: `GuessSprayPolicy`, calls no tool and tells the user every plausible value of the task's answer
  types, read from the world's records the way a cheater would enumerate them.
- ``skip-auth``: the oracle without its authentication calls.
- ``skip-confirm``: the oracle that writes without asking the user first.
- ``every-write``: `EveryWritePolicy`, the oracle that also calls every other write tool (confirmed, with seeded
  random arguments) before its own first write.

Like the oracle they read hidden data (the task's answer types, the reference solution), so they are measuring
instruments for rubrics, never agents to train.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, Protocol

from envgym.loader import EnvironmentData, load_environment
from envgym.play.policies import OraclePolicy, Policy, RandomPolicy, RefusePolicy, _random_value
from envgym.play.scripted import confirmation_request, needs_confirmation, scripted_turns
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir
from envgym.rewards.toolcalls import leaves
from envgym.spaces import MAX_TEXT
from envgym.users import STOP
from envgym.world.spec import AnswerType, TaskSpec
from envgym.world.state import WorldState


def _data(data: EnvironmentData | None, info: dict[str, Any]) -> EnvironmentData:
    return data or load_environment(str(find_env_dir(info["env_name"])))


def plausible_values(state: WorldState, kinds: set[AnswerType]) -> list[str]:
    """Every value of the given answer types a cheater can list from the records (plus the numbers 0..1000)."""
    found_leaves = [leaf for table in state.tables.values() for record in table.values() for leaf in leaves(record)]
    numbers = sorted({leaf for leaf in found_leaves if isinstance(leaf, int | float) and not isinstance(leaf, bool)})
    strings = sorted({leaf for leaf in found_leaves if isinstance(leaf, str)})
    found: list[str] = []
    if kinds & {"number", "money"}:
        found += [str(n) for n in range(1001)] + [f"{n:.2f}" for n in numbers] + [str(n) for n in numbers]
    if kinds & {"id", "enum", "text", "date", "time"}:
        found += strings
    return list(dict.fromkeys(found))


class _Scripted(Protocol):
    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]: ...


def _next_turn(policy: _Scripted, data: EnvironmentData | None, scripts: dict[tuple[str, str], list[str]],
               info: dict[str, Any]) -> str:
    """The policy's turn for this point of the episode, from its script of the task (made once per task)."""
    key = (info["env_name"], info["task_id"])
    if key not in scripts:
        loaded = _data(data, info)
        scripts[key] = policy.turns(loaded, loaded.task(info["task_id"]))
    turns = scripts[key]
    turn = sum(1 for m in info["messages"] if m["role"] == "assistant")
    return turns[turn] if turn < len(turns) else f"Goodbye. {STOP}"


class GuessSprayPolicy:
    """Tells the user every plausible value of the task's answer types, in as few turns as the action space allows,
    then ends the conversation; it never calls a tool."""

    def __init__(self, data: EnvironmentData | None = None, max_length: int = MAX_TEXT):
        self.data = data
        self.max_length = max_length
        self._scripts: dict[tuple[str, str], list[str]] = {}  # the turns depend on the task only

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        kinds: set[AnswerType] = {a.type for a in task.answers} or {"number", "money", "id", "enum", "text"}
        values = plausible_values(data.initial, kinds)
        chunks, current = [], ""
        for value in values:
            piece = f"{value}; "
            if len(current) + len(piece) > self.max_length - 200:
                chunks.append(current)
                current = ""
            current += piece
        chunks.append(current)
        return [f"It is one of these: {chunk}" for chunk in chunks]

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return _next_turn(self, self.data, self._scripts, info)


class EveryWritePolicy:
    """The oracle's script with a confirmed call of every write tool the solution does not use, before the reply."""

    def __init__(self, data: EnvironmentData | None = None, seed: int = 0):
        self.data = data
        self.seed = seed
        self._scripts: dict[tuple[str, str], list[str]] = {}  # the turns depend on the task and the seed only

    def turns(self, data: EnvironmentData, task: TaskSpec) -> list[str]:
        rng = random.Random(f"{self.seed}:{task.id}")
        script = scripted_turns(data.world, task)
        used = {c.name for c in task.solution}
        extra: list[str] = []
        for tool in data.world.tools:
            if tool.read_only or tool.name in used:
                continue
            args = _random_value(tool.parameters, rng)
            if needs_confirmation(data.world, tool.name):
                extra.append(confirmation_request(tool.name, args if isinstance(args, dict) else None))
            extra.append(format_tool_call(tool.name, args if isinstance(args, dict) else {}))
        # Before the task's own first write: once the goal is met the user ends the conversation.
        writes = [i for i, c in enumerate(task.solution) if not self._read_only(data, c.name)]
        at = script.index(self._first_turn_of(data, task, writes[0])) if writes else len(script) - 1
        return script[:at] + extra + script[at:]

    @staticmethod
    def _read_only(data: EnvironmentData, name: str) -> bool:
        tool = data.world.tool(name)
        return tool is None or tool.read_only

    @staticmethod
    def _first_turn_of(data: EnvironmentData, task: TaskSpec, index: int) -> str:
        call = task.solution[index]
        if needs_confirmation(data.world, call.name):
            return confirmation_request(call.name, call.arguments)
        return format_tool_call(call.name, call.arguments)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return _next_turn(self, self.data, self._scripts, info)


NEGATIVE_CONTROLS: dict[str, Callable[[EnvironmentData | None, int], Policy]] = {
    "do-nothing": lambda data, seed: RefusePolicy(),
    "random": lambda data, seed: RandomPolicy(seed),
    "guess-spray": lambda data, seed: GuessSprayPolicy(data),
    "skip-auth": lambda data, seed: OraclePolicy(data, authenticate=False),
    "skip-confirm": lambda data, seed: OraclePolicy(data, confirm=False),
    "every-write": lambda data, seed: EveryWritePolicy(data, seed),
}


def negative_control(name: str, data: EnvironmentData | None = None, seed: int = 0) -> Policy:
    """A negative control by name (see the module docstring)."""
    if name not in NEGATIVE_CONTROLS:
        raise ValueError(f"unknown negative control {name!r}; expected one of {sorted(NEGATIVE_CONTROLS)}")
    return NEGATIVE_CONTROLS[name](data, seed)
