"""Combining the verifiable reward with a judge score into the one reward a trainer sees.

The verifiable reward (`envgym.rewards.rubric`) and the judge score (`envgym.rewards.judge`) stay separate
components; this module is the single place where they meet, chosen by configuration.
"""

from __future__ import annotations

import math
from typing import Literal

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
        raise ValueError(f"combine_rewards: mode must be one of {COMBINE_MODES}, got {mode!r}")
    if not 0.0 <= judge_weight <= 1.0:
        raise ValueError(f"combine_rewards: judge_weight must be in [0, 1], got {judge_weight}")
    if not 0.0 <= gate_floor < 1.0:
        raise ValueError(f"combine_rewards: gate_floor must be in [0, 1), got {gate_floor}")
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
        raise ValueError(f"combine_rewards: {name} reward must be a number in [0, 1], got {value!r}")
