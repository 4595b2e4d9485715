"""Reflective prompt optimization: GEPA (a per-task Pareto front of system prompts) and ACE (an itemized playbook)."""

from __future__ import annotations

from envgym.optimize.candidates import Candidate, EditError, PlaybookItem, PlaybookOp, merge_candidates
from envgym.optimize.pareto import pareto_front
from envgym.optimize.reflect import Reflection, ReflectionRejected, Reflector, parse_reflection
from envgym.optimize.search import OptimizeConfig, Optimizer, OptimizeResult, PromptedPolicy, split_tasks

__all__ = [
    "Candidate",
    "EditError",
    "OptimizeConfig",
    "OptimizeResult",
    "Optimizer",
    "PlaybookItem",
    "PlaybookOp",
    "PromptedPolicy",
    "Reflection",
    "ReflectionRejected",
    "Reflector",
    "merge_candidates",
    "pareto_front",
    "parse_reflection",
    "split_tasks",
]
