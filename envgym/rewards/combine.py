"""Combining the verifiable reward with a judge score: the one place rewards meet, for training and eval.

The verifiable reward (`envgym.rewards.rubric`) and the judge score (`envgym.rewards.judge`) stay separate
components; `combine_rewards` is where they meet, chosen by configuration, and a `RewardSource` scores a group of
episodes of one task with it (the trainer's groups, eval's runs of a task).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envgym.rewards.credit import bounded_reward
from envgym.rewards.source import RewardConfigError, RewardSource, Scored

CombineMode = Literal["gate", "weighted", "verifiable", "judge"]


COMBINE_MODES: tuple[CombineMode, ...] = ("gate", "weighted", "verifiable", "judge")


def combine_rewards(
    verifiable: float,
    judge: float | None,
    mode: CombineMode = "gate",
    *,
    judge_weight: float = 0.5,
    gate_threshold: float = 1.0,
    gate_floor: float = 0.5,
) -> float:
    """The combined reward in [0, 1] for a verifiable reward and a judge score, both in [0, 1].

    - `verifiable`: `verifiable`.
    - `judge`: `judge`.
    - `weighted`: `(1 - judge_weight) * verifiable + judge_weight * judge`.
    - `gate` (default): a trajectory passes when `verifiable >= gate_threshold` (default 1.0). Passing ones get
      `gate_floor + (1 - gate_floor) * judge`, failing ones `gate_floor * verifiable` (default floor 0.5), so
      every passing trajectory beats every failing one and the judge orders the passing ones.

    A missing judge score (None: no judge, an identical group or a failed judge call) falls back to the
    verifiable reward in every mode, so a judge failure never invents a reward.
    """
    _check_unit("verifiable", verifiable)
    if mode not in COMBINE_MODES:
        raise RewardConfigError(f"combine_rewards: mode must be one of {COMBINE_MODES}, got {mode!r}")
    if not 0.0 <= judge_weight <= 1.0:
        raise RewardConfigError(f"combine_rewards: judge_weight must be in [0, 1], got {judge_weight}")
    if not 0.0 <= gate_floor < 1.0:
        raise RewardConfigError(f"combine_rewards: gate_floor must be in [0, 1), got {gate_floor}")
    if judge is None or mode == "verifiable":
        return verifiable
    _check_unit("judge", judge)
    if mode == "judge":
        return judge
    if mode == "weighted":
        return (1.0 - judge_weight) * verifiable + judge_weight * judge
    if verifiable >= gate_threshold:
        return gate_floor + (1.0 - gate_floor) * judge
    return gate_floor * verifiable


def _check_unit(name: str, value: float) -> None:
    if not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise RewardConfigError(f"combine_rewards: {name} reward must be a number in [0, 1], got {value!r}")


@dataclass
class EnvReward:
    """The env's verifiable reward at episode end (0 for an episode cut short before the env graded it)."""

    name: str = "env"

    def score(self, episodes: Sequence[Scored]) -> list[float]:
        return [episode.reward for episode in episodes]


@dataclass
class JudgedReward:
    """The verifiable reward combined with a relative judge's scores by `combine_rewards` in `mode`.

    `judge` is `envgym.rewards.judge.RelativeJudge` or anything with its `score_group(trajectories, tools)`
    returning a result with `values` and `status`. A group the judge cannot score (identical trajectories, a failed
    reply) keeps its verifiable rewards, by `combine_rewards`' rule; `failures` counts failed replies.

    With `validate` (the default) the judge is checked before its first score is used: it ranks `labelled` (a
    sequence of `envgym.rewards.judge_check.LabelledGroup`, or a function making one, e.g.
    `envgym.play.labelled.labelled_groups`). A judge that ranks no better than chance, or that has no labelled set to
    be checked on, is reported with a warning and its weight set to 0: every episode then gets its verifiable reward,
    rather than the same judge score for all. `check` holds the outcome.
    """

    judge: Any
    mode: CombineMode = "weighted"
    judge_weight: float = 0.5
    name: str = "judge"
    failures: int = 0
    validate: bool = True
    labelled: Sequence[Any] | Callable[[], Sequence[Any]] | None = None
    check: Any = None  # envgym.rewards.judge_check.JudgeCheck, once validated

    def score(self, episodes: Sequence[Scored]) -> list[float]:
        if self.validate and self.check is None:
            self._validate()
        if self.judge_weight == 0.0 and self.mode == "verifiable":
            return [e.reward for e in episodes]
        result = self.judge.score_group([e.messages for e in episodes], episodes[0].tools)
        if result.values is None and result.status == "failed":
            self.failures += 1
        judged: Sequence[float | None] = result.values if result.values is not None else [None] * len(episodes)
        return [combine_rewards(e.reward, None if j is None else float(j), self.mode, judge_weight=self.judge_weight)
                for e, j in zip(episodes, judged, strict=True)]

    def _validate(self) -> None:
        from envgym.rewards.judge_check import check_judge

        if self.labelled is None:
            why = "judge not validated (no labelled set)"
        else:
            self.check = check_judge(self.judge, self.labelled() if callable(self.labelled) else self.labelled)
            why = self.check.summary()
        if self.check is None or not self.check.informative:
            warnings.warn(f"{self.name}: {why}; its weight is set to 0 (verifiable reward only)", stacklevel=3)
            self.mode, self.judge_weight = "verifiable", 0.0
            self.validate = False  # checked once


@dataclass
class ProgressReward:
    """Partial credit for training: the env's verifiable reward plus `weight` per *credited* tool call of the episode
    (a needed call: one whose result the agent went on to use, or that moved the world toward the task's target;
    deduplicated, at most as many calls of each tool as the reference solution makes, none that broke a rule;
    `envgym.rewards.toolcalls`), added by `envgym.rewards.credit.bounded_reward`. A group in which every episode
    fails then still ranks its episodes by how far they got (verified the user, read the right record), where the
    verifiable reward alone gives all of them 0 and the group no advantage, and no failed episode reaches a
    successful one however many calls it makes. Errors and repeats are not charged: a transient failure and its
    retry are the agent's job here, not a fault. An episode cut short before the env graded it has no labelled calls
    and scores 0.

    With `requires_answer`, an episode of a task that asks for an answer earns the credit only if its final reply
    reported one (`answer_reported`, set by the env: a value of each answer type that a tool returned, right or
    wrong; `envgym.rewards.answers.reported_result`). Without it, an episode that does the lookups and then asks the
    user again until they give up earns what a wrong answer earns, and a group can rank asking above answering.
    The gate only takes credit away: no episode scores more than without it.
    """

    weight: float = 0.1
    name: str = "env+tools"
    requires_answer: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight >= 0.0):
            raise RewardConfigError(f"ProgressReward: weight must be a finite number >= 0, got {self.weight!r}")

    def score(self, episodes: Sequence[Scored]) -> list[float]:
        return [bounded_reward(episode.reward, self.weight * self._credited(episode)) for episode in episodes]

    def _credited(self, episode: Scored) -> int:
        if self.requires_answer and getattr(episode, "answer_reported", None) is False:
            return 0
        return int(getattr(episode, "tool_calls_credited", 0))


REWARD_KINDS = ("env", "judge", "env+judge", "env+tools", "env+program")


def build_reward_source(
    kind: str, judge_model: str = "local", judge_weight: float = 0.5, tool_call_weight: float = 0.1,
    solutions: Mapping[str, Sequence[Any]] | None = None,
    labelled: Sequence[Any] | Callable[[], Sequence[Any]] | None = None, credit_requires_answer: bool = False,
) -> RewardSource:
    """The source named by `kind`: 'env' (verifiable only), 'judge' (the judge's score), 'env+judge'
    (`(1 - judge_weight) * env + judge_weight * judge`), 'env+tools' (`env + tool_call_weight * credited calls`,
    `ProgressReward`) or 'env+program' (`env + tool_call_weight * reference calls made`, `ProgramReward`, which
    needs the tasks' reference `solutions` by task id); both shaping credits are bounded below a success
    (`envgym.rewards.credit`); with `credit_requires_answer`, 'env+tools' pays it only to episodes whose final
    reply reports an answer (`ProgressReward.requires_answer`). The judge kinds check their judge on `labelled`
    first (`JudgedReward`)."""
    if credit_requires_answer and kind != "env+tools":
        raise RewardConfigError(f"credit_requires_answer applies to reward 'env+tools' only, not {kind!r}")
    if kind == "env":
        return EnvReward()
    if kind == "env+tools":
        return ProgressReward(tool_call_weight, requires_answer=credit_requires_answer)
    if kind == "env+program":
        if solutions is None:
            raise RewardConfigError("reward 'env+program' needs the tasks' reference solutions")
        from envgym.rewards.program import ProgramReward

        return ProgramReward(solutions, tool_call_weight)
    if kind not in REWARD_KINDS:
        raise RewardConfigError(f"unknown reward source {kind!r}; expected one of {REWARD_KINDS}")
    from envgym.llm import load_chat_model
    from envgym.rewards.judge import RelativeJudge

    mode: CombineMode = "judge" if kind == "judge" else "weighted"
    return JudgedReward(RelativeJudge(load_chat_model(judge_model)), mode, judge_weight, name=kind, labelled=labelled)
