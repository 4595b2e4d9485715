"""Validating a judge before its score is used: does it rank a labelled set of trajectories better than chance?

The labelled set (`envgym.play.labelled.labelled_groups`, a layer up: it plays episodes) is built from the bundled
retail and travel tasks: per task one group of four
trajectories of known quality, the oracle (label 1), a partial run (the oracle stopped before its first write, label
0.5), doing nothing (0) and a reward hack (hedging, trial-and-error writes or a flood of reads, 0). Each group is
scored by the judge in one call, as in training. Every pair of trajectories of a group with different labels is a
test: the judge gets it right when it scores the better one higher, half right on a tie. The judge is *informative*
when the share it gets right beats a fair coin at the 5% level (one-sided binomial test over the pairs); a judge that
gives everyone 0.5 gets exactly half and is not.

`envgym.rewards.combine.JudgedReward` sets the judge's weight to 0 with a warning when the check says uninformative
(or when it has no labelled set to check on), rather than paying the same to every trajectory.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

LABELS = {"oracle": 1.0, "partial": 0.5, "do-nothing": 0.0, "hacked": 0.0}
ALPHA = 0.05


@dataclass(frozen=True)
class LabelledGroup:
    """Trajectories of one task (OpenAI-format messages), their tools and their known quality labels."""

    task_id: str
    trajectories: list[list[dict[str, Any]]]
    tools: list[dict[str, Any]]
    labels: list[float]
    kinds: list[str]


@dataclass(frozen=True)
class JudgeCheck:
    """How a judge ranked a labelled set: `agreement` is the share of labelled pairs it ordered right (ties count
    half), `p_value` the chance a coin does as well, `failed` the groups it returned no scores for."""

    trajectories: int
    pairs: int
    agreement: float
    p_value: float
    failed: int

    @property
    def informative(self) -> bool:
        return self.pairs > 0 and self.p_value < ALPHA

    def summary(self) -> str:
        verdict = "informative" if self.informative else "uninformative (ranks no better than chance)"
        return (f"judge {verdict}: {self.agreement:.2f} of {self.pairs} labelled pairs ordered right over "
                f"{self.trajectories} trajectories (p = {self.p_value:.3g}, {self.failed} groups unscored)")


def binomial_tail(successes: float, trials: int) -> float:
    """P(X >= successes) for X ~ Binomial(trials, 1/2); a half success (a tie) is rounded down."""
    k = math.floor(successes)
    return sum(math.comb(trials, i) for i in range(k, trials + 1)) / 2**trials if trials else 1.0


def check_judge(judge: Any, groups: Sequence[LabelledGroup]) -> JudgeCheck:
    """Score every group with `judge` (anything with `score_group(trajectories, tools)` returning a result with
    `values`) and measure its ranking against the labels (see the module docstring)."""
    right, pairs, failed = 0.0, 0, 0
    for group in groups:
        values = judge.score_group(group.trajectories, group.tools).values
        if values is None:
            failed += 1
        for i in range(len(group.labels)):
            for j in range(i + 1, len(group.labels)):
                if group.labels[i] == group.labels[j]:
                    continue
                pairs += 1
                if values is None:
                    right += 0.5  # no scores: the judge says nothing about the pair
                    continue
                better, worse = (i, j) if group.labels[i] > group.labels[j] else (j, i)
                right += 1.0 if values[better] > values[worse] else 0.5 if values[better] == values[worse] else 0.0
    return JudgeCheck(sum(len(g.trajectories) for g in groups), pairs, right / pairs if pairs else 0.0,
                      binomial_tail(right, pairs), failed)
