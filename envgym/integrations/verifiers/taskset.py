"""The taskset half: an envgym environment's tasks as verifiers tasks, each opening as the env opens it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import verifiers.v1 as vf
from pydantic import Field

from envgym.env import ToolWorldEnv


def env_id(name: str) -> str:
    """A gymnasium id from an environment name (`retail`) or id (`envgym/retail-v0`)."""
    return name if ("/" in name or ":" in name) else f"envgym/{name}-v0"


def make_env(name: str, max_steps: int | None) -> ToolWorldEnv:
    kwargs: dict[str, Any] = {} if max_steps is None else {"max_steps": max_steps}
    env = gym.make(env_id(name), disable_env_checker=True, **kwargs).unwrapped
    if not isinstance(env, ToolWorldEnv):
        raise TypeError(f"{env_id(name)} is not an envgym tool world ({type(env).__name__})")
    return env


class EnvgymTasksetConfig(vf.TasksetConfig):
    env: str = "retail"
    """Environment name (`retail`) or gymnasium id (`envgym/retail-v0`)."""
    task_ids: list[str] = Field(default_factory=list)
    """The tasks to play, in this order (empty: every task of the env, in its order)."""
    seed: int = 0
    """Task i is reset with seed `seed + i` (the user simulator's and the world's randomness)."""
    max_steps: int | None = Field(None, ge=1)
    """Agent turns before the episode is truncated (None: the env's own limit)."""


class EnvgymData(vf.TaskData):
    env: str
    task_id: str
    seed: int
    max_steps: int | None = None
    tools: list[dict[str, Any]] = Field(default_factory=list)
    """The env's tools as OpenAI tool schemas, sent with every chat completion."""


class EnvgymTask(vf.Task[EnvgymData, vf.State, vf.TaskConfig]):
    @property
    def key(self) -> str:
        return f"{self.data.env}/{self.data.task_id}/{self.data.seed}"


class EnvgymTaskset(vf.Taskset[EnvgymTask, EnvgymTasksetConfig]):
    def load(self) -> Iterator[EnvgymTask]:
        config = self.config
        env = make_env(config.env, config.max_steps)
        try:
            known = [task.id for task in env.data.tasks]
            unknown = [t for t in config.task_ids if t not in known]
            if unknown:
                raise ValueError(f"{env_id(config.env)} has no task {', '.join(map(repr, unknown))}; it has "
                                 f"{len(known)}: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''}")
            for i, task_id in enumerate(config.task_ids or known):
                _, info = env.reset(seed=config.seed + i, options={"task_id": task_id})
                system, user = info["messages"][:2]
                yield EnvgymTask(EnvgymData(
                    id=task_id, name=task_id, prompt=str(user["content"]), system_prompt=str(system["content"]),
                    env=config.env, task_id=task_id, seed=config.seed + i, max_steps=config.max_steps,
                    tools=list(info["tools"]),
                ), config.task)
        finally:
            env.close()
