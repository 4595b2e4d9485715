"""The oracle's script: a task's reference solution played as turns that keep the world's policy rules.

It authenticates where the solution does, asks the user before each write the rules want confirmed (one turn to ask,
then the write after the user's answer), and closes with a reply that holds the task's answers. The switches
`authenticate` and `confirm` turn it into the skip-authentication and skip-confirmation negative controls.
"""

from __future__ import annotations

import json
from typing import Any

from envgym.protocol import format_tool_call
from envgym.world.spec import TaskSpec, WorldSpec


def needs_confirmation(world: WorldSpec, name: str) -> bool:
    """Whether the world's rules want the user's yes before a call of tool `name` (a write)."""
    tool = world.tool(name)
    return world.rules is not None and world.rules.confirm_writes and tool is not None and not tool.read_only


def confirmation_request(name: str, arguments: dict[str, Any] | None = None) -> str:
    """The request for the user's yes before a write: the action and, given `arguments`, every value it will write
    (the scripted user confirms only a change stated with its values; answers are read from the final reply only,
    so the values here add no candidate to the answers check)."""
    action = name.replace("_", " ")
    if arguments:
        values = ", ".join(f"{key.replace('_', ' ')} {_said(value)}" for key, value in arguments.items())
        action = f"{action} with {values}"
    return f"I am ready to {action} as you asked. Shall I go ahead? (yes/no)"


def _said(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return " and ".join(_said(v) for v in value) or "none"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_said(v)}" for k, v in value.items())
    return json.dumps(value)


def closing_reply(task: TaskSpec) -> str:
    """The reference final reply, with any answer or required output it does not already contain appended."""
    reply = task.final_reply or "Done."
    wanted = [a.value for a in task.answers] + list(task.required_outputs)
    missing = [w for w in wanted if w.lower() not in reply.lower()]
    return " ".join([reply, *missing])


def scripted_turns(world: WorldSpec, task: TaskSpec, *, authenticate: bool = True, confirm: bool = True) -> list[str]:
    """The agent's turns in order: tool calls (one per turn), confirmation requests, then the closing reply."""
    auth_tools = set(world.rules.authenticate_with) if world.rules is not None else set()
    turns: list[str] = []
    for call in task.solution:
        if not authenticate and call.name in auth_tools:
            continue
        if confirm and needs_confirmation(world, call.name):
            turns.append(confirmation_request(call.name, call.arguments))
        turns.append(format_tool_call(call.name, call.arguments))
    turns.append(closing_reply(task))
    return turns
