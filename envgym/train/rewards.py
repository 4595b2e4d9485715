"""Pluggable reward sources for a group: the env's verifiable reward, a relative judge, or a mix."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from envgym.play.episode import Trajectory


class RewardSource(Protocol):
    """Scores the episodes of one group (same task), one float each, in order."""

    name: str

    def score(self, episodes: Sequence[Trajectory]) -> list[float]: ...


@dataclass
class EnvReward:
    """The env's verifiable reward at episode end (0 for an episode the trainer cut short)."""

    name: str = "env"

    def score(self, episodes: Sequence[Trajectory]) -> list[float]:
        return [episode.reward for episode in episodes]


@dataclass
class JudgeReward:
    """Scores from a relative judge (`envgym.rewards.judge.RelativeJudge` or anything with its
    `score_group(trajectories, tools)` method returning a result with `values` and `status`).

    A group the judge cannot score (identical trajectories, a failed reply) gets 0 for every episode:
    equal rewards give zero advantage, so the group carries no judge signal rather than made-up scores.
    """

    judge: Any
    name: str = "judge"
    failures: int = field(default=0)

    def score(self, episodes: Sequence[Trajectory]) -> list[float]:
        result = self.judge.score_group([e.messages for e in episodes], episodes[0].tools)
        values = result.values
        if values is None:
            if result.status == "failed":
                self.failures += 1
            return [0.0] * len(episodes)
        return [float(v) for v in values]


@dataclass
class CombinedReward:
    """r = sum_k weight_k * source_k; the weights are used as given (not renormalised)."""

    sources: list[RewardSource]
    weights: list[float]
    name: str = "combined"

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.weights) or not self.sources:
            raise ValueError(
                f"CombinedReward needs one weight per source, got {len(self.sources)} sources "
                f"and {len(self.weights)} weights"
            )

    def score(self, episodes: Sequence[Trajectory]) -> list[float]:
        parts = [source.score(episodes) for source in self.sources]
        return [sum(w * p[i] for w, p in zip(self.weights, parts, strict=True)) for i in range(len(episodes))]


def build_reward_source(kind: str, judge_model: str, judge_weight: float) -> RewardSource:
    """The source a `GRPOConfig` names: 'env', 'judge' or 'env+judge'."""
    if kind == "env":
        return EnvReward()
    from envgym.llm import load_chat_model
    from envgym.rewards.judge import RelativeJudge

    judge = JudgeReward(RelativeJudge(load_chat_model(judge_model)))
    if kind == "judge":
        return judge
    if kind == "env+judge":
        return CombinedReward([EnvReward(), judge], [1.0 - judge_weight, judge_weight])
    raise ValueError(f"unknown reward source {kind!r}; expected 'env', 'judge' or 'env+judge'")
