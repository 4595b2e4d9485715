"""`envgym/bfcl-v0`: a BFCL single-turn entry (simple, multiple, parallel, parallel_multiple, live_*, irrelevance)
as a one-action episode graded by BFCL's AST checker.

``reset`` returns the entry's function docs as tools (names with `.` written as `_`, as BFCL's FC handlers send
them) and its question. ``step(action)`` takes the agent's one response and ends the episode: its tool calls are
decoded to BFCL's `{name: {param: value}}` form and graded as BFCL's eval runner grades an FC model's response
(the AST checker against the possible answers; for irrelevance and live_irrelevance, success is making no call;
for live_relevance, making one). A response without calls, or with a call that does not parse, decodes to
nothing, as in BFCL. The reward is 1.0 when BFCL's verdict is valid, else 0.0; ``info["bfcl"]`` holds the verdict.
Nothing is executed.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

from envgym.integrations.bfcl import data
from envgym.integrations.bfcl.base import BfclEnvBase
from envgym.integrations.bfcl.checkers import single_turn_verdict
from envgym.protocol import ParsedCall, parse_action


def decode(calls: list[ParsedCall]) -> list[dict[str, Any]] | None:
    """The calls in BFCL's AST form, or None where BFCL's FC decoding fails (no call, or one that did not parse
    into a name and an object of arguments)."""
    if not calls or any(c.error is not None or not isinstance(c.arguments, dict) for c in calls):
        return None
    return [{c.name: dict(c.arguments)} for c in calls]


class BfclEnv(BfclEnvBase):
    """A BFCL single-turn entry as a one-action episode (see the module docstring for the contract)."""

    env_name = "bfcl"

    def __init__(self, category: str | list[str] | None = None, task: str | None = None, *,
                 max_steps: int | None = None, seed: int | None = None, tool_format: str | None = None,
                 render_mode: str | None = None):
        super().__init__(data.SINGLE_TURN_CATEGORIES, category, task, max_steps, seed, tool_format, render_mode)
        self.entry: dict[str, Any] = {}
        self.tools: list[dict[str, Any]] = []

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        task_id = self._choose_task(seed, options)
        self.entry = data.entry(task_id)
        self.tools = data.tool_schemas(self.entry["function"])
        question = [{"role": m["role"], "content": m["content"]} for m in self.entry["question"][0]]
        # A live entry may open with its own system message: it joins the env's, so there is one.
        extra = [m["content"] for m in question if m["role"] == "system"]
        system = "\n\n".join([data.prompts()[0], *extra])
        self.messages = [{"role": "system", "content": system}, *(m for m in question if m["role"] != "system")]
        self.steps, self._done = 0, False
        rest = self._renderer.observation(self.messages[1:])
        return f"system: {system}\n\n{self._renderer.tools_prompt(self.tools)}\n\n{rest}", self._info()

    def step(self, action: Any) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self._done:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info()
        self.steps += 1
        refusal = self._refusal(action)
        if refusal is not None:
            info = self._info()
            info["action_error"] = "action_too_long"
            truncated = self.max_steps is not None and self.steps >= self.max_steps
            return refusal, self._grade(None, info) if truncated else 0.0, False, truncated, info
        message, calls = parse_action(action, id_prefix=f"call_{self.steps}_", fmt=self.tool_format)
        self.messages.append(message)
        info = self._info()
        reward = self._grade(decode(calls), info)
        return "(the episode has ended: BFCL grades one response)", reward, True, False, info

    def _grade(self, decoded: list[dict[str, Any]] | None, info: dict[str, Any]) -> float:
        self._done = True
        task_id = self.entry["id"]
        category = data.category_of(task_id)
        verdict = single_turn_verdict(decoded, data.entry(task_id, for_checker=True), data.ground_truth(task_id),
                                      category)
        info["bfcl"] = self.last_verdict = verdict.as_info()
        info["reward_components"] = {"bfcl": float(verdict.valid)}
        info["category"] = category
        return float(verdict.valid)

    def _info(self) -> dict[str, Any]:
        return {"env_name": self.env_name, "task_id": self.entry.get("id"), "messages": self.messages,
                "tools": self.tools, "step": self.steps, "tool_errors": []}
