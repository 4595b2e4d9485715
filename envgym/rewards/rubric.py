"""The verifiable rubric: final-state hash, env assertions and required outputs.

A task passes (reward 1.0) only if the final state equals the state its reference solution reaches on a fresh copy
of the initial world, every assertion holds and every required output was said to the user. Any path to that end
state passes.
"""

from __future__ import annotations

import math
import re
from typing import Any

from envgym.protocol import strip_tool_calls
from envgym.world.replay import check_assertion
from envgym.world.spec import TaskSpec
from envgym.world.state import WorldState

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
    task: TaskSpec, state: WorldState, target_hash: str, messages: list[dict[str, Any]]
) -> dict[str, float]:
    """Reward components, each 0.0 or 1.0: `state`, `assertions`, `outputs`."""
    said = normalize_text(agent_replies(messages))
    return {
        "state": float(state.hash() == target_hash),
        "assertions": float(all(check_assertion(state, a) for a in task.assertions)),
        "outputs": float(all(normalize_text(o) in said for o in task.required_outputs)),
    }


def total_reward(components: dict[str, float]) -> float:
    """The episode reward: the product of the components (all binary parts must pass; graded parts scale it)."""
    return math.prod(components.values()) if components else 0.0
