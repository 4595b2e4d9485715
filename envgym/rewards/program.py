"""Partial credit that follows the task's own program: reward 'env+program'.

`ProgressReward` ('env+tools') credits the calls the env labels *needed*, which the env only labels once it has
graded the episode: an episode the trainer cuts at its turn cap scores 0 however far it got, and a call on the
wrong record counts once its result is used. `ProgramReward` credits instead how far the episode followed the
task's reference solution: the number of the solution's calls the agent made, in the solution's order (the same
tool with the same arguments; other calls may come between), read from the conversation itself, so an episode
cut short keeps what it did. A lookup that verified and listed but never asked which record scores below one
that asked and read the record the user meant, since that call's arguments come from the user's answer.

The reference solution is the task's hidden program; it shapes the training reward only. Success stays the
verifiable reward's (>= 1), and what the policy sees is unchanged.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envgym.protocol import parse_action
from envgym.rewards.credit import bounded_reward
from envgym.rewards.source import RewardConfigError, Scored

Call = tuple[str, tuple[tuple[str, str], ...]]


def _normalized(name: str, arguments: Any) -> Call | None:
    """A call as a comparable key: its name and its arguments with every value written as text (a postcode sent
    as 61997 or "61997" is the same call); None for arguments that are not a JSON object."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return name, tuple(sorted((str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in arguments.items()))


def calls_made(messages: Sequence[Mapping[str, Any]], excluded: Collection[int] = ()) -> list[Call]:
    """The tool calls of the assistant's messages, in order, as comparable keys (malformed ones left out). A message
    may hold them as OpenAI `tool_calls` (the env's history) or as the model's own text (the trainer's token view of
    the conversation): both are read the way the env reads an action (`envgym.protocol.parse_action`). `excluded`
    are positions among all the calls, malformed ones included (the env's order), to leave out too."""
    out = []
    position = 0
    for message in messages:
        if message.get("role") != "assistant":
            continue
        _, calls = parse_action(dict(message))
        for call in calls:
            key = None if call.error else _normalized(call.name, call.arguments)
            if key is not None and position not in excluded:
                out.append(key)
            position += 1
    return out


def reference_calls_made(messages: Sequence[Mapping[str, Any]], solution: Sequence[Any],
                         excluded: Collection[int] = ()) -> int:
    """How many calls of `solution` (objects or dicts with `name` and `arguments`) the conversation made in the
    solution's order: the longest prefix of the solution that is a subsequence of the agent's calls, the calls at
    positions `excluded` (those that broke a rule) left out. At most `len(solution)`, however many calls were made."""
    wanted = []
    for step in solution:
        name, arguments = (step["name"], step["arguments"]) if isinstance(step, Mapping) else (step.name, step.arguments)
        key = _normalized(name, arguments)
        if key is None:
            raise ValueError(f"reference solution call {name!r} has arguments that are not an object: {arguments!r}")
        wanted.append(key)
    matched = 0
    for call in calls_made(messages, excluded):
        if matched < len(wanted) and call == wanted[matched]:
            matched += 1
    return matched


@dataclass
class ProgramReward:
    """The env's verifiable reward plus `weight` per reference-solution call made in order (`reference_calls_made`),
    also for episodes the trainer stopped, bounded by `envgym.rewards.credit.bounded_reward` (a failed episode stays
    below 1). Calls the env found to break a rule or held by the guard (`Trajectory.broke_rule_calls`) earn nothing;
    an episode the trainer stopped before the env graded it has no such list, so its calls are read as they stand.
    `solutions` maps each task id to its reference solution."""

    solutions: Mapping[str, Sequence[Any]]
    weight: float = 0.1
    name: str = field(default="env+program")

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0.0):
            raise RewardConfigError(f"ProgramReward: weight must be a finite number >= 0, got {self.weight!r}")

    def score(self, episodes: Sequence[Scored]) -> list[float]:
        scores = []
        for episode in episodes:
            task_id = getattr(episode, "task_id", None)
            if not isinstance(task_id, str) or task_id not in self.solutions:
                raise RewardConfigError(f"ProgramReward: no reference solution for task {task_id!r}")
            excluded = frozenset(getattr(episode, "broke_rule_calls", ()))
            made = reference_calls_made(episode.messages, self.solutions[task_id], excluded)
            scores.append(bounded_reward(episode.reward, self.weight * made))
        return scores
