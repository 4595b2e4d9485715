"""The verifiable rubric: final-state hash, env assertions, exact answers, required outputs and the policy's rules.

A task passes (reward 1.0) only if the final state equals the state its reference solution reaches on a fresh copy
of the initial world, every assertion holds, its answers were said without guessing (`envgym.rewards.answers`),
every required output was said to the user, and the trajectory kept each rule the world declares
(`envgym.rewards.rules`). Any path to that end state that keeps the rules passes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from envgym.protocol import strip_tool_calls
from envgym.rewards.answers import answers_pass
from envgym.rewards.rules import check_rules
from envgym.world.replay import check_assertion
from envgym.world.spec import TaskSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolResult

_NUMBER_SEP_RE = re.compile(r"(?<=\d)[,_](?=\d{3})")
_SPACE_RE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """Lower case, digit group separators removed, whitespace collapsed: how required outputs are matched."""
    return _SPACE_RE.sub(" ", _NUMBER_SEP_RE.sub("", text.lower())).strip()


def agent_replies(messages: list[dict[str, Any]]) -> str:
    """Everything the agent said to the user (assistant text outside tool calls)."""
    return "\n".join(
        strip_tool_calls(m.get("content") or "") for m in messages if m.get("role") == "assistant"
    )


def grade(
    task: TaskSpec,
    state: WorldState,
    target_hash: str,
    messages: list[dict[str, Any]],
    *,
    world: WorldSpec | None = None,
    results: Sequence[ToolResult] = (),
) -> dict[str, float]:
    """Reward components, each 0.0 or 1.0: `state`, `assertions`, `answers`, `outputs`, and one per rule that
    `world.rules` declares (`rule_authenticate`, `rule_confirm`, `rule_no_extra_writes`), checked on `messages`
    with `results[i]` the result of the i-th tool message."""
    components = {
        "state": float(state.hash() == target_hash),
        "assertions": float(_assertions_hold(task, state)),
        "answers": float(answers_pass(task.answers, messages)),
        "outputs": float(_outputs_said(task, messages)),
    }
    if world is not None:
        components.update(check_rules(world, task, messages, results, state))
    return components


def passes(
    task: TaskSpec,
    state: WorldState,
    target_hash: str,
    messages: list[dict[str, Any]],
    *,
    world: WorldSpec | None = None,
    results: Sequence[ToolResult] = (),
) -> bool:
    """Whether every component of `grade` is 1.0, i.e. the task is done.

    The scripted user asks this after every agent turn, when the task is usually not done yet: the components are
    checked cheapest and most often failing first (the state hash, then what was said), and the first that fails
    ends the check, where `grade` computes them all.
    """
    if state.hash() != target_hash or not _outputs_said(task, messages):
        return False
    if not answers_pass(task.answers, messages) or not _assertions_hold(task, state):
        return False
    rules = check_rules(world, task, messages, results, state) if world is not None else {}
    return all(value == 1.0 for value in rules.values())


def _assertions_hold(task: TaskSpec, state: WorldState) -> bool:
    return all(check_assertion(state, a) for a in task.assertions)


def _outputs_said(task: TaskSpec, messages: list[dict[str, Any]]) -> bool:
    if not task.required_outputs:
        return True
    said = normalize_text(agent_replies(messages))
    return all(normalize_text(o) in said for o in task.required_outputs)


def total_reward(components: dict[str, float]) -> float:
    """The episode reward: the product of the components (all binary parts must pass; graded parts scale it)."""
    return math.prod(components.values()) if components else 0.0
