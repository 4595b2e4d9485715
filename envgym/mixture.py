"""Several environments as one: a policy trained on a mixture of domains draws tasks of all of them.

`MixtureEnv(["envgym/a-v0", "envgym/b-v0"])` lists the tasks of every env in one `data.tasks`: the first env's
under their own ids, and last (so that a trainer's held-out tail, `GRPOConfig.heldout_tasks`, is the first env's
held-out users alone), the others' before them as ``"<env id>::<task id>"``. `reset(options={"task_id": id})`
resets the env the task belongs to; `step` goes to that env. Observations, rewards and `info` are the inner env's,
with `info["task_id"]` the mixture's id, so rewards keyed by task (reference solutions) find it.

Register one under a gym id of its own to use it where only an id is passed (`GRPOConfig.env_id`):
``gym.register("envgym/my-mix-v0", entry_point="envgym.mixture:MixtureEnv", kwargs={"env_ids": [...]})``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

from envgym.world.errors import UnknownTaskError

SEPARATOR = "::"


@dataclass(frozen=True)
class MixtureData:
    """What a trainer reads of a folder env's data: the tasks (renamed), and the first env's folder."""

    tasks: list[Any]
    directory: Path

    def task(self, task_id: str) -> Any:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise UnknownTaskError(f"mixture has no task {task_id!r} (it has {len(self.tasks)} tasks)")


class MixtureEnv(gym.Env[str, str]):
    """The tasks of `env_ids` behind one env (see the module docstring)."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium declares it an instance attribute)

    def __init__(self, env_ids: Sequence[str]) -> None:
        ids = list(env_ids)
        if not ids or not all(isinstance(e, str) for e in ids):
            raise ValueError(f"MixtureEnv: env_ids must be a non-empty list of gym ids, got {env_ids!r}")
        if len(set(ids)) != len(ids):
            raise ValueError(f"MixtureEnv: env_ids names an env twice: {ids}")
        self.env_ids = ids
        self.envs = [gym.make(env_id) for env_id in ids]
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self._route: dict[str, tuple[int, str]] = {}
        tasks = []
        for index in [*range(1, len(ids)), 0]:
            inner: Any = self.envs[index].unwrapped
            if not hasattr(inner, "data") or not hasattr(inner.data, "tasks"):
                raise ValueError(f"MixtureEnv: {ids[index]} lists no tasks (a folder env's data.tasks)")
            for task in inner.data.tasks:
                name = task.id if index == 0 else f"{ids[index]}{SEPARATOR}{task.id}"
                self._route[name] = (index, task.id)
                tasks.append(task if index == 0 else task.model_copy(update={"id": name}))
        first: Any = self.envs[0].unwrapped
        self.data = MixtureData(tasks, Path(first.data.directory))
        self._current: Any = None
        self._task_id: str | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = dict(options or {})
        task_id = options.pop("task_id", None) or options.pop("task", None)
        if task_id is None:
            task_id = self.data.tasks[int(self.np_random.integers(len(self.data.tasks)))].id
        if str(task_id) not in self._route:
            raise UnknownTaskError(f"mixture of {', '.join(self.env_ids)} has no task {task_id!r}")
        index, inner = self._route[str(task_id)]
        self._current, self._task_id = self.envs[index], str(task_id)
        observation, info = self._current.reset(seed=seed, options={**options, "task_id": inner})
        return observation, self._named(info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._current is None:
            raise RuntimeError("MixtureEnv.step before reset")
        observation, reward, terminated, truncated, info = self._current.step(action)
        return observation, reward, terminated, truncated, self._named(info)

    def _named(self, info: dict[str, Any]) -> dict[str, Any]:
        return {**info, "task_id": self._task_id} if "task_id" in info else info

    def close(self) -> None:
        for env in self.envs:
            env.close()
        super().close()
