"""The fair planner: the policy whose trajectories become demonstrations.

`FairPlanner` acts like an agent that understood the request: it runs the task's program, asking the user for
each fact it needs, taking every other value from tool results it has seen, confirming before each write and
retrying transient and rate-limit errors. It never reads the reference solution or the user's facts, so every value
in its tool calls appeared earlier in the conversation (`synth.rollouts.unseen_values` checks that).
"""

from __future__ import annotations

import json
from typing import Any

from envgym.play.scripted import confirmation_request
from envgym.protocol import format_tool_call
from envgym.rewards.rules import is_affirmative
from envgym.users import STOP
from synth.lexicon import lexical
from synth.program import Ask, CallRequest, Program, ProgramError, Reply, run
from synth.stages.tasks import question

# The opening question of `FairPlanner(open_first=True)`: the scripted user answers it with their request, in their
# own words and without the facts they hold (those come when asked).
OPEN_QUESTION = "How can I help you today?"

# How the tools word a failure that a retry of the same call may get past (transient, rate limit).
RETRYABLE = ("temporarily unavailable", "rate limit exceeded")


def _fact(text: str, key: str) -> str | None:
    """The value the scripted user gave for `key` ("My zip code is 12345.", "The new memo is front desk.")."""
    for marker in (f"My {lexical(key)} is ", f"The {lexical(key)} is "):
        start = text.find(marker)
        if start >= 0:
            break
    else:
        return None
    rest = text[start + len(marker):]
    ends = [at for at in (rest.find(". My "), rest.find(". The ")) if at >= 0]
    if ends:  # the sentence's own period ends the value ("My full name is Ray Gibson Jr.. My phone is ...")
        return rest[:min(ends)]
    return rest[:-1] if rest.endswith(".") else rest


class FairPlanner:
    """Plays a task's program using only the conversation (see the module docstring).

    With `open_first` it first asks the user what they need (`OPEN_QUESTION`), so the request itself is in the
    conversation before any answer is given, and then asks only for facts the user has not already stated (the
    scripted user states none unasked)."""

    def __init__(self, program: Program, retries: int = 3, open_first: bool = False):
        self.gen = run(program)
        self.request: Ask | CallRequest | Reply | None = None
        self.waiting = "open" if open_first else "start"
        self.open_first = open_first
        self.heard: list[str] = []  # what the user has said so far
        self.retries = retries
        self.tries = 0

    def _advance(self, value: Any) -> str:
        first = self.waiting == "start"
        while True:
            try:
                self.request = next(self.gen) if first else self.gen.send(value)
            except (StopIteration, ProgramError):
                self.waiting = "done"
                return f"I cannot go any further with this. {STOP}"
            first = False
            req = self.request
            if not isinstance(req, Ask):
                break
            stated = self._stated(req.key)
            if stated is None:
                self.waiting = "ask"
                return question(req.key)
            value = stated
        if isinstance(req, CallRequest):
            if req.write:
                self.waiting = "confirm"
                return confirmation_request(req.tool, req.arguments)
            return self._call(req)
        self.waiting = "reply"
        return req.text

    def _stated(self, key: str) -> str | None:
        """The value the user already gave for `key` (newest message first); None without `open_first`."""
        if not self.open_first:
            return None
        return next((v for text in reversed(self.heard) if (v := _fact(text, key)) is not None), None)

    def _call(self, req: CallRequest) -> str:
        self.waiting, self.tries = "result", 0
        return format_tool_call(req.tool, req.arguments)

    def act(self, obs: str, info: dict[str, Any]) -> str:
        last = info["messages"][-1]
        content = str(last.get("content") or "")
        if last.get("role") == "user":
            self.heard.append(content)
        if self.waiting == "open":
            self.waiting = "start"
            return OPEN_QUESTION
        if self.waiting == "start":
            return self._advance(None)
        if self.waiting == "ask":
            assert isinstance(self.request, Ask)
            value = _fact(content, self.request.key)
            return self._advance(value) if value is not None else question(self.request.key)
        if self.waiting == "confirm":
            assert isinstance(self.request, CallRequest)
            return self._call(self.request) if is_affirmative(content) else f"Understood, I will not change it. {STOP}"
        if self.waiting == "result":
            assert isinstance(self.request, CallRequest)
            try:
                result = json.loads(content)
            except json.JSONDecodeError:
                result = content
            if isinstance(result, dict) and "error" in result:
                if any(m in str(result["error"]) for m in RETRYABLE) and self.tries < self.retries:
                    self.tries += 1
                    return format_tool_call(self.request.tool, self.request.arguments)
                self.waiting = "done"
                return f"The system refused that: {result['error']} {STOP}"
            return self._advance(result)
        return f"Goodbye. {STOP}"
