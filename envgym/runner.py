"""Running episodes: one policy, one env, a trajectory record; many episodes with rich progress and JSONL output."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.policies import Policy


@dataclass
class Trajectory:
    """One finished episode: the whole conversation, the tools, the reward and its components."""

    env_name: str
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    reward: float
    reward_components: dict[str, float]
    steps: int
    terminated: bool
    truncated: bool
    wall_s: float
    tokens: int = 0
    tool_errors: list[str] = field(default_factory=list)
    seed: int | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, default=str)


def run_episode(
    env: gym.Env, policy: Policy, *, seed: int | None = None, options: dict[str, Any] | None = None
) -> Trajectory:
    """Play one episode to its end and return its trajectory."""
    start = time.perf_counter()
    obs, info = env.reset(seed=seed, options=options)
    reward, terminated, truncated, steps = 0.0, False, False, 0
    tool_errors: list[str] = []
    tokens_before = getattr(policy, "tokens", 0)
    while not (terminated or truncated):
        action = policy.act(obs, info)
        obs, r, terminated, truncated, info = env.step(action)
        reward = float(r)
        steps += 1
        tool_errors.extend(info.get("tool_errors", []))
    return Trajectory(
        env_name=info["env_name"],
        task_id=info["task_id"],
        messages=list(info["messages"]),
        tools=info["tools"],
        reward=reward,
        reward_components=info.get("reward_components", {}),
        steps=steps,
        terminated=terminated,
        truncated=truncated,
        wall_s=time.perf_counter() - start,
        tokens=getattr(policy, "tokens", 0) - tokens_before,
        tool_errors=tool_errors,
        seed=seed,
    )


def run_episodes(
    env: gym.Env,
    policy: Policy,
    episodes: int,
    *,
    seed: int = 0,
    task_ids: list[str] | None = None,
    out: str | Path | None = None,
    progress: bool = True,
) -> list[Trajectory]:
    """Run `episodes` episodes (over `task_ids` in turn when given), appending each trajectory to `out` as JSONL."""
    results: list[Trajectory] = []
    sink = Path(out).open("a") if out else None  # noqa: SIM115 (closed in finally; optional)
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("mean reward {task.fields[mean]:.2f}"),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, disable=not progress, transient=False) as bar:
            job = bar.add_task("episodes", total=episodes, mean=0.0)
            for i in range(episodes):
                options = {"task_id": task_ids[i % len(task_ids)]} if task_ids else None
                traj = run_episode(env, policy, seed=seed + i, options=options)
                results.append(traj)
                if sink:
                    sink.write(traj.to_json() + "\n")
                    sink.flush()
                bar.update(job, advance=1, mean=sum(t.reward for t in results) / len(results))
    finally:
        if sink:
            sink.close()
    return results
