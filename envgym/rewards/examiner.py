"""A pairwise examiner: can two rollouts of one task be told apart on its rubric?

The synthesizer's difficulty stage asks this of a strong and a weak rollout: a task whose rollouts cannot be
told apart gives a relative judge (and GRPO) no signal. The pair is judged in both orders, so a judge that
just prefers the first (or second) trajectory does not count as telling them apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envgym.rewards.judge import Message, RelativeJudge


@dataclass(frozen=True)
class PairVerdict:
    """The examiner's answer for rollouts a and b.

    `distinguishable` is None when the judge gave no valid scores (see `error`). `score_a`/`score_b` are the
    mean over both orders; `better` names the higher-scored rollout when the pair is distinguishable.
    """

    distinguishable: bool | None
    score_a: float | None
    score_b: float | None
    better: Literal["a", "b"] | None
    reason: str
    error: str | None = None


@dataclass
class PairwiseExaminer:
    """Judges a pair in both orders; distinguishable when both orders prefer the same rollout by >= margin."""

    judge: RelativeJudge
    margin: float = 0.2

    def examine(
        self,
        a: Sequence[Message],
        b: Sequence[Message],
        tools: Sequence[dict[str, Any]],
        rubric: str | None = None,
    ) -> PairVerdict:
        """Compare rollouts `a` and `b` of one task on `rubric` (None: the judge's default)."""
        if list(a) == list(b):
            return PairVerdict(False, None, None, None, "the rollouts are identical")
        forward = self.judge.score_group([a, b], tools, rubric)
        if forward.values is None:
            return PairVerdict(None, None, None, None, "the judge gave no valid scores", error=forward.error)
        backward = self.judge.score_group([b, a], tools, rubric)
        if backward.values is None:
            return PairVerdict(None, None, None, None, "the judge gave no valid scores", error=backward.error)
        gap_forward = forward.values[0] - forward.values[1]
        gap_backward = backward.values[1] - backward.values[0]
        score_a = (forward.values[0] + backward.values[1]) / 2
        score_b = (forward.values[1] + backward.values[0]) / 2
        same_side = gap_forward * gap_backward > 0
        if same_side and min(abs(gap_forward), abs(gap_backward)) >= self.margin:
            better: Literal["a", "b"] = "a" if gap_forward > 0 else "b"
            return PairVerdict(
                True, score_a, score_b, better, f"both orders prefer {better} by at least {self.margin}"
            )
        gaps = f"a-b gaps {gap_forward:+.2f} and {gap_backward:+.2f}"
        reason = (
            f"the two orders prefer different rollouts ({gaps})"
            if gap_forward * gap_backward < 0
            else f"the gap is under the margin {self.margin} ({gaps})"
        )
        return PairVerdict(False, score_a, score_b, None, reason)
