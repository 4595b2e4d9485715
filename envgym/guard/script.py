"""Scripted conversations judged by the guard without an agent: the user's words, planted text and a list of calls.

A `Script` is what a look-alike or attack-route suite needs: the user's request, text appended to records before
the episode (an attacker's payload, a look-alike value), and the calls an agent makes. `judge_script` plays the
calls on a fresh copy of an environment's start state through its guard, as `EpisodeGuard` would: reads are
recorded, each sink call is judged, a held call is confirmed (`deny`: refused; `user`: the simulated user approves
only a call whose every change is part of the script's own goal, computed by running the script's `goal` calls
without a guard) and runs only if approved.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from envgym.guard.core import Guard, Verdict
from envgym.guard.episode import serves_goal
from envgym.loader import EnvironmentData
from envgym.world.state import WorldState


@dataclass(frozen=True)
class Call:
    """One call of a script: a tool and its arguments."""

    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Script:
    """A conversation to judge: the user's request, text appended to record fields ("entity/key/field" -> text,
    or "entity/key/field=" to replace the field) and the calls. `goal`: the calls whose effect the user wants (for
    `user` mode; default: none, so the simulated user approves nothing)."""

    id: str
    user: str
    calls: tuple[Call, ...]
    plant: dict[str, str] = field(default_factory=dict)
    goal: tuple[Call, ...] = ()


@dataclass(frozen=True)
class Judged:
    """A script's outcome: each sink call's verdict, in order, and whether it ran."""

    script: Script
    verdicts: tuple[tuple[Verdict, bool], ...]

    @property
    def refused(self) -> list[Verdict]:
        return [v for v, ran in self.verdicts if not ran]


def _planted(data: EnvironmentData, plant: dict[str, str]) -> WorldState:
    state = data.initial.copy()
    for where, text in plant.items():
        path, replace = (where[:-1], True) if where.endswith("=") else (where, False)
        entity, key, name = path.split("/")
        record = state.tables[entity].get(key)
        if record is None:
            raise KeyError(f"plant {where!r}: no {entity} record {key!r}")
        record[name] = text if replace else f"{record[name]}\n\n{text}"
    return state


def judge_script(data: EnvironmentData, script: Script, mode: Literal["deny", "user"] = "deny") -> Judged:
    """Play `script` on `data`'s start state (with its plants) through the environment's guard in `mode`."""
    guard = Guard.build(data.world, {"confirm": mode})
    if guard is None:
        raise ValueError(f"environment {data.name!r} has its guard switched off")
    state = _planted(data, script.plant)
    target = state.copy()
    for call in script.goal:
        data.executor.execute(target, call.tool, call.arguments)
    provenance = guard.provenance()
    provenance.add_system(data.world.system_prompt)
    provenance.add_user(script.user)
    verdicts: list[tuple[Verdict, bool]] = []
    for call in script.calls:
        if guard.is_sink(call.tool):
            verdict = guard.judge(call.tool, call.arguments, provenance,
                                  lambda entity, key: state.tables.get(entity, {}).get(key),
                                  lambda entity: state.tables.get(entity, {}))
            ran = verdict.allowed or (mode == "user" and serves_goal(data.executor, state, target, call.tool,
                                                                      call.arguments))
            verdicts.append((verdict, ran))
            if not ran:
                continue
        result = data.executor.execute(state, call.tool, call.arguments)
        guard.record_result(provenance, call.tool, json.dumps(result.payload()), call.arguments)
    return Judged(script, tuple(verdicts))


def load_scripts(items: list[dict[str, Any]], play_goal: bool = False) -> list[Script]:
    """Scripts from plain dicts (a YAML list): {id, user, calls: [{tool: args}], plant, goal}. `play_goal`: the goal's
    calls are made after `calls` (a benign script: the user's own action is the call judged)."""

    def calls(raw: list[dict[str, Any]]) -> tuple[Call, ...]:
        out = []
        for item in raw:
            if len(item) != 1:
                raise ValueError(f"a call is one mapping tool -> arguments, got {item!r}")
            ((tool, arguments),) = item.items()
            out.append(Call(tool, dict(arguments or {})))
        return tuple(out)

    return [Script(id=str(item["id"]), user=str(item["user"]),
                   calls=calls(item["calls"]) + (calls(item.get("goal") or []) if play_goal else ()),
                   plant=dict(item.get("plant") or {}), goal=calls(item.get("goal") or []))
            for item in items]
