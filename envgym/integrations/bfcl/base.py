"""What the two BFCL environments share: text spaces, the tool-call format, task choice and oversized actions."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym

from envgym.integrations.bfcl import data
from envgym.protocol import renderer
from envgym.spaces import TextSpace
from envgym.world.errors import EnvConfigError


class BfclEnvBase(gym.Env[str, Any]):
    """Spaces, format and task choice of a BFCL environment over the categories `categories` (a subset of
    `choices`); `task` fixes one entry id, else `reset` takes `options["task_id"]` or draws one."""

    metadata = {"render_modes": ["ansi"], "render_fps": 1}  # noqa: RUF012 (gymnasium declares it an instance attribute)
    # `info["messages"]` only grows within an episode: an env server may send only the new messages.
    info_messages_append_only = True
    env_name = "bfcl"

    def __init__(self, choices: tuple[str, ...], category: str | list[str] | None, task: str | None,
                 max_steps: int | None, seed: int | None, tool_format: str | None, render_mode: str | None):
        names = [category] if isinstance(category, str) else list(category or choices)
        self.categories = [data.resolve_category(c, choices) for c in names]
        self.choices = choices
        if task is not None:
            self._check_task(task)
        self.fixed_task = task
        if max_steps is not None and max_steps < 1:
            raise EnvConfigError(f"max_steps: expected at least 1, got {max_steps}")
        self.max_steps = max_steps
        self.render_mode = render_mode
        self.action_space = TextSpace()
        self.observation_space = TextSpace()
        self.tool_format = None if tool_format in (None, "auto") else tool_format
        self._renderer = renderer(self.tool_format)
        self._default_seed = seed
        self.messages: list[dict[str, Any]] = []
        self.steps = 0
        self._done = True
        self.last_verdict: dict[str, Any] | None = None  # BFCL's verdict on the last episode that ended

    def _check_task(self, task_id: str) -> str:
        category = data.category_of(task_id)
        if category not in self.choices:
            raise EnvConfigError(f"{task_id!r} is not a task of {self.env_name} (its categories: "
                                 f"{', '.join(self.choices)})")
        data.entry(task_id)  # an unknown id raises, naming it
        return task_id

    def _choose_task(self, seed: int | None, options: dict[str, Any] | None) -> str:
        """The episode's task: `options["task_id"]` (or `"task"`), the fixed task, or a draw from the env's RNG."""
        if seed is None and self._default_seed is not None:
            seed, self._default_seed = self._default_seed, None
        super().reset(seed=seed)
        self.last_verdict = None
        options = options or {}
        chosen = options.get("task_id") or options.get("task") or self.fixed_task
        if chosen is not None:
            return self._check_task(str(chosen))
        pool = [t for c in self.categories for t in data.task_ids(c)]
        return pool[int(self.np_random.integers(len(pool)))]

    def _refusal(self, action: Any) -> str | None:
        """The error observation for an action longer than the action space allows (neither run nor recorded)."""
        size = len(action) if isinstance(action, str) else len(json.dumps(action, default=str))
        limit = self.action_space.max_length if isinstance(self.action_space, gym.spaces.Text) else size
        if size <= limit:
            return None
        return (f"Your turn was refused and not carried out: it is {size} characters long, over the limit of "
                f"{limit} characters per turn.")

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._renderer.observation(self.messages)
        return None
