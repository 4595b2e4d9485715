"""The guard: tool labels, provenance tracking, intent scope, confirmation, attack planting and delimiters.

`core` holds the threat model, the per-world rules and the public entry point (`Guard.judge`); `provenance` tracks
where values came from; `atoms` parses argument values into typed atoms; `intent` reads what the user's request
asks for; `text` normalizes, finds addresses and links, and escapes; `episode` runs it all over one episode of an
env; `script` judges scripted conversations (look-alike and route suites).
"""

from envgym.guard.core import (
    SYSTEM_NOTE,
    Confirm,
    ConfirmationRequest,
    FieldRule,
    Guard,
    GuardConfig,
    RecordLookup,
    RecordRule,
    RecordTable,
    TargetRule,
    ToolRule,
    Verdict,
)
from envgym.guard.episode import AttackSuite, EpisodeGuard, GuardSession, serves_goal
from envgym.guard.provenance import Provenance
from envgym.guard.text import UNTRUSTED_CLOSE, UNTRUSTED_OPEN, escape_control, mentions, normalize

__all__ = [
    "SYSTEM_NOTE",
    "UNTRUSTED_CLOSE",
    "UNTRUSTED_OPEN",
    "AttackSuite",
    "Confirm",
    "ConfirmationRequest",
    "EpisodeGuard",
    "FieldRule",
    "Guard",
    "GuardConfig",
    "GuardSession",
    "Provenance",
    "RecordLookup",
    "RecordRule",
    "RecordTable",
    "TargetRule",
    "ToolRule",
    "Verdict",
    "escape_control",
    "mentions",
    "normalize",
    "serves_goal",
]
