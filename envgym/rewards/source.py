"""What every reward source shares: the episode it reads, the interface it offers, the error it raises. Kept apart
from `envgym.rewards.combine` so that sources in their own modules (`envgym.rewards.program`) import it without a
cycle; `combine` re-exports all three."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class RewardConfigError(ValueError):
    """A reward setting or input outside its documented range (the message names it and what was expected)."""


class Scored(Protocol):
    """What a reward source reads from an episode (`envgym.play.episode.Trajectory` has it)."""

    reward: float
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


class RewardSource(Protocol):
    """Scores the episodes of one group (same task), one float each, in order."""

    name: str

    def score(self, episodes: Sequence[Scored]) -> list[float]: ...
