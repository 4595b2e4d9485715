"""Bounded shaping credit: how partial credit is added to the verifiable reward so that it cannot be farmed.

Every shaping reward (the env's per-call rewards, 'env+tools', 'env+program') adds a credit to the episode's
verifiable reward `r` through `bounded_reward`:

- a successful episode (`r >= 1`) gets `r + max(credit, 0)`: shaping orders successes, never takes one below 1;
- a failed episode (`r < 1`) gets `r + min(credit, CREDIT_CAP * (1 - r))`, which is below
  `CREDIT_CAP + (1 - CREDIT_CAP) * r < 1`.

So a failed episode never out-earns a successful one, whatever the credit's weight or the number of calls behind it.
The credit itself is bounded before it gets here: the calls that earn it are deduplicated and matched against the
task's reference solution, and calls that broke a rule earn nothing (`envgym.rewards.toolcalls`).
"""

from __future__ import annotations

import math

from envgym.rewards.source import RewardConfigError

# The most a failed episode's credit can add, as a share of the reward it did not earn.
CREDIT_CAP = 0.5


def bounded_reward(reward: float, credit: float) -> float:
    """The verifiable `reward` plus shaping `credit`, bounded as the module docstring says."""
    if not (math.isfinite(reward) and math.isfinite(credit)):
        raise RewardConfigError(f"bounded_reward: reward and credit must be finite, got {reward!r} and {credit!r}")
    if reward >= 1.0:
        return reward + max(credit, 0.0)
    return reward + min(credit, CREDIT_CAP * (1.0 - reward))
