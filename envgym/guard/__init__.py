"""The guard: tool labels, provenance (taint) tracking, confirmation, attack planting and untrusted-data delimiters.

`core` holds the threat model and the per-world rules; `episode` runs them over one episode of an env.
"""

from envgym.guard.core import (
    SYSTEM_NOTE,
    UNTRUSTED_CLOSE,
    UNTRUSTED_OPEN,
    Confirm,
    ConfirmationRequest,
    Guard,
    GuardConfig,
    GuardSession,
    TargetRule,
    ToolRule,
    mentions,
    serves_goal,
)
from envgym.guard.episode import AttackSuite, EpisodeGuard

__all__ = [
    "SYSTEM_NOTE",
    "UNTRUSTED_CLOSE",
    "UNTRUSTED_OPEN",
    "AttackSuite",
    "Confirm",
    "ConfirmationRequest",
    "EpisodeGuard",
    "Guard",
    "GuardConfig",
    "GuardSession",
    "TargetRule",
    "ToolRule",
    "mentions",
    "serves_goal",
]
