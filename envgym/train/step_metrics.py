"""A step's rollout metrics over every rank's groups: each rank summarises its own groups in a few numbers,
the summaries are gathered in rank order (the global order of the step's groups), and every rank computes
the same row from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from envgym.train import distributed
from envgym.train.rollout import Group


@dataclass(frozen=True)
class GroupSummary:
    """What the metrics need of one group: its rewards, policy version and episode counters."""

    rewards: list[float]
    policy_version: int
    successes: int
    tool_calls: int
    turns: int
    tool_errors: int
    truncated: int
    sampled_tokens: int
    prefix_mismatches: int
    noncanonical_joins: int
    unverified_turns: int

    @classmethod
    def of(cls, group: Group) -> GroupSummary:
        episodes = group.episodes
        return cls(
            rewards=list(group.rewards),
            policy_version=group.policy_version,
            successes=sum(e.success for e in episodes),
            tool_calls=sum(e.tool_calls for e in episodes),
            turns=sum(e.steps for e in episodes),
            tool_errors=sum(len(e.tool_errors) for e in episodes),
            truncated=sum(e.truncated for e in episodes),
            sampled_tokens=sum(e.sampled_tokens for e in episodes),
            prefix_mismatches=sum(e.prefix_mismatches for e in episodes),
            noncanonical_joins=sum(e.noncanonical_joins for e in episodes),
            unverified_turns=sum(e.unverified_turns for e in episodes),
        )


@dataclass(frozen=True)
class RankRollouts:
    """One rank's share of a step: its groups' summaries, its rollout time and the stale groups it dropped."""

    groups: list[GroupSummary]
    rollout_s: float
    dropped_stale: int


def gather_rollouts(groups: list[Group], rollout_s: float, dropped_stale: int) -> list[RankRollouts]:
    """Every rank's `RankRollouts`, in rank order (one collective; the local one alone outside torchrun)."""
    local = RankRollouts([GroupSummary.of(g) for g in groups], rollout_s, dropped_stale)
    return distributed.all_gather(local)


def rollout_metrics(ranks: list[RankRollouts], version: int, zero_std_tolerance: float) -> dict[str, Any]:
    """The rollout half of a metrics row over all ranks' groups. `rollout_s` is the slowest rank's (the step
    waits for it) and `tokens_per_s` all ranks' sampled tokens over it."""
    groups = [g for r in ranks for g in r.groups]
    rewards = torch.tensor([x for g in groups for x in g.rewards], dtype=torch.float64)
    group_std = [torch.tensor(g.rewards, dtype=torch.float64).std(unbiased=False).item() for g in groups]
    episodes = len(rewards)
    calls = sum(g.tool_calls for g in groups)
    turns = sum(g.turns for g in groups)
    rollout_s = max(r.rollout_s for r in ranks)
    return {
        "policy_version": version,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std(unbiased=False)),
        "reward_min": float(rewards.min()),
        "reward_max": float(rewards.max()),
        "success_rate": sum(g.successes for g in groups) / episodes,
        "frac_zero_std_groups": sum(s <= zero_std_tolerance for s in group_std) / len(groups),
        "tool_call_frequency": calls / max(turns, 1),
        "tool_failure_frequency": sum(g.tool_errors for g in groups) / max(calls, 1),
        "truncated_fraction": sum(g.truncated for g in groups) / episodes,
        "prefix_mismatches": sum(g.prefix_mismatches for g in groups),
        "noncanonical_joins": sum(g.noncanonical_joins for g in groups),
        "unverified_turns": sum(g.unverified_turns for g in groups),
        "max_staleness_seen": max(version - g.policy_version for g in groups),
        "dropped_stale": sum(r.dropped_stale for r in ranks),
        "rollout_groups_per_rank": [len(r.groups) for r in ranks],
        "rollout_s": rollout_s,
        "tokens_per_s": sum(g.sampled_tokens for g in groups) / max(rollout_s, 1e-9),
    }
