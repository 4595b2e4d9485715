"""The no-tool control: an agent that calls no tool, asks how it can help, and repeats back what the user says.

A task it passes grades something the user's own words already hold (a fact echoed back, an answer the instruction
gives away), not the use of the world's tools, so verification rejects it.
"""

from __future__ import annotations

from typing import Any

from envgym.users import STOP

OPENING = "How can I help you today?"
MAX_ECHOES = 3


class NoToolPolicy:
    """Never calls a tool: opens with a question, echoes each user message back (facts and all), then stops."""

    def __init__(self) -> None:
        self.turn = 0
        self.heard: list[str] = []

    def act(self, obs: str, info: dict[str, Any]) -> str:
        last = info["messages"][-1]
        if last.get("role") == "user":
            self.heard.append(str(last.get("content") or ""))
        self.turn += 1
        if self.turn == 1:
            return OPENING
        if self.turn <= MAX_ECHOES:
            return f"I understand: {self.heard[-1] if self.heard else ''} Is there anything else you can tell me?"
        return f"To sum up what you told me: {' '.join(self.heard)} {STOP}"
