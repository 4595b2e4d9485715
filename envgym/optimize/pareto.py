"""The per-task Pareto front over candidates (GEPA's selection pool) and how a parent is drawn from it."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

Scores = Mapping[str, Mapping[str, float]]  # candidate id -> task id -> score


def best_on(scores: Scores, tasks: Sequence[str]) -> dict[str, list[str]]:
    """For each candidate, the tasks on which no other candidate scores higher (ties count for all of them)."""
    top = {t: max(s[t] for s in scores.values()) for t in tasks}
    return {c: [t for t in tasks if s[t] >= top[t]] for c, s in scores.items()}


def pareto_front(scores: Scores, tasks: Sequence[str]) -> list[str]:
    """The candidates that are best on at least one task, without redundant ones, in pool order.

    A candidate is redundant when every task it is best on is also won by another candidate still on the front
    (ties, copies, a seed its child matches everywhere). Redundant ones leave weakest first (lowest mean score,
    later candidates before earlier ones on equal means), so every task keeps a best candidate and the front is
    never empty while the pool is not.
    """
    order = list(scores)
    wins = best_on(scores, tasks)
    front = {c for c in order if wins[c]}
    for c in sorted(front, key=lambda c: (mean_score(scores, c, tasks), -order.index(c))):
        others = front - {c}
        if others and all(any(t in wins[d] for d in others) for t in wins[c]):
            front.remove(c)
    return [c for c in order if c in front]


def choose_parent(scores: Scores, tasks: Sequence[str], rng: random.Random) -> str:
    """A front candidate drawn with weight = the number of tasks it is best on (seeded, so runs repeat)."""
    front = pareto_front(scores, tasks)
    wins = best_on(scores, tasks)
    return rng.choices(front, weights=[max(1, len(wins[c])) for c in front])[0]


def mean_score(scores: Scores, candidate: str, tasks: Sequence[str]) -> float:
    return sum(scores[candidate][t] for t in tasks) / len(tasks) if tasks else 0.0
