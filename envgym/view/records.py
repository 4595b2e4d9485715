"""Trajectory files of every producer read into one `EpisodeRecord`.

Read: `Trajectory` JSON lines (`envgym run --out`, the `episodes.jsonl` that `envgym eval` writes), synth rollouts
(`{"env", "task_id", "k", "seed", "reward", "components", "messages", ...}`) and any other JSON line holding an
episode's `messages` with its env and task (`env_name` or `env`, `task_id`). A line that is not such an object is an
error naming the file, the line and what is missing; blank lines are skipped.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class RecordError(ValueError):
    """A trajectory file line that is not an episode; the message names the file, the line and the problem."""


@dataclass
class EpisodeRecord:
    """One episode as the viewers show it: the conversation, its grade and what the guard held."""

    env: str
    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    reward: float | None = None
    components: dict[str, float] = field(default_factory=dict)
    seed: int | None = None
    attack: str | None = None
    guard: list[dict[str, Any]] | None = None  # None: the producer did not record the guard's decisions
    steps: int = 0
    truncated: bool = False
    tool_errors: list[str] = field(default_factory=list)
    failure_rate: float | None = None  # None: the world's own (synth rollouts record the one they ran with)
    source: str = ""  # "<file>:<line>" or where the record came from

    @property
    def success(self) -> bool:
        return self.reward is not None and self.reward >= 1.0


def record_from_dict(obj: Any, source: str) -> EpisodeRecord:
    """One episode from a decoded JSON object (see the module docstring for the shapes read)."""
    if not isinstance(obj, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(obj).__name__}")
    messages = obj.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise RecordError(f"{source}: no 'messages' list of chat messages (each with a 'role')")
    env = obj.get("env_name", obj.get("env"))
    if not isinstance(env, str) or not env:
        raise RecordError(f"{source}: no 'env_name' or 'env' naming the environment")
    task_id = obj.get("task_id")
    if not isinstance(task_id, str):
        raise RecordError(f"{source}: no 'task_id'")
    components = obj.get("reward_components", obj.get("components")) or {}
    reward = obj.get("reward")
    guard = obj.get("guard")
    return EpisodeRecord(
        env=env, task_id=task_id, messages=messages, tools=list(obj.get("tools") or []),
        reward=float(reward) if isinstance(reward, int | float) else None,
        components={str(k): float(v) for k, v in components.items()},
        seed=obj.get("seed") if isinstance(obj.get("seed"), int) else None,
        attack=obj.get("attack"), guard=list(guard) if isinstance(guard, list) else None,
        steps=int(obj.get("steps") or sum(m["role"] == "assistant" for m in messages)),
        truncated=bool(obj.get("truncated", False)),
        tool_errors=[str(e) for e in obj.get("tool_errors") or [] if e is not None],
        failure_rate=float(obj["failure_rate"]) if isinstance(obj.get("failure_rate"), int | float) else None,
        source=source,
    )


def record_from_trajectory(trajectory: Any, source: str = "") -> EpisodeRecord:
    """An in-memory `envgym.play.episode.Trajectory` as a record (what `envgym run` prints)."""
    return record_from_dict(asdict(trajectory), source or f"{trajectory.env_name}/{trajectory.task_id}")


def read_records(path: str | Path) -> list[EpisodeRecord]:
    """Every episode of a JSONL file, in file order."""
    path = Path(path)
    records = []
    with path.open() as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise RecordError(f"{path}:{number}: not JSON ({exc.msg})") from None
            records.append(record_from_dict(obj, f"{path}:{number}"))
    if not records:
        raise RecordError(f"{path}: no episodes in this file")
    return records
