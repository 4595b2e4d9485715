"""Accuracy per BFCL category, as BFCL's score tables give it (the share of entries its checker marks valid), with
95% Wilson intervals, from episodes played through the BFCL environments.

BFCL's summary columns average categories without weights (its "Multi Turn Overall Acc" is the mean of the four
multi-turn categories): `CategoryTable.overall` does the same over the categories run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.integrations.bfcl import data
from envgym.optimize.report import wilson
from envgym.play.episode import Trajectory, run_episode
from envgym.play.policies import Policy


@dataclass
class CategoryScore:
    """One category's result: `correct` of `n` entries valid, and the 95% Wilson interval of the accuracy."""

    category: str
    n: int
    correct: int
    task_ids: list[str] = field(default_factory=list)
    error_types: dict[str, int] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        return self.correct / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.correct, self.n)


@dataclass
class CategoryTable:
    """Per-category scores of one policy on one BFCL environment."""

    env_id: str
    policy: str
    scores: list[CategoryScore]
    sampled: bool
    seed: int

    @property
    def overall(self) -> float:
        """The unweighted mean of the category accuracies (BFCL's summary columns)."""
        return sum(s.accuracy for s in self.scores) / len(self.scores) if self.scores else 0.0

    def rows(self) -> list[dict[str, Any]]:
        return [{"category": s.category, "n": s.n, "correct": s.correct, "accuracy": s.accuracy,
                 "ci95": list(s.interval), "error_types": s.error_types} for s in self.scores]

    def markdown(self) -> str:
        lines = ["| category | entries | valid | accuracy | 95% interval |", "|---|---:|---:|---:|---|"]
        for s in self.scores:
            low, high = s.interval
            lines.append(f"| {s.category} | {s.n} | {s.correct} | {100 * s.accuracy:.1f}% "
                         f"| {100 * low:.1f}-{100 * high:.1f}% |")
        lines.append(f"| overall (unweighted mean) | {sum(s.n for s in self.scores)} | "
                     f"{sum(s.correct for s in self.scores)} | {100 * self.overall:.1f}% | |")
        return "\n".join(lines)

    def write(self, out: Path, trajectories: list[Trajectory]) -> dict[str, Path]:
        out.mkdir(parents=True, exist_ok=True)
        paths = {"results": out / "results.json", "report": out / "report.md",
                 "trajectories": out / "trajectories.jsonl"}
        summary = {"env": self.env_id, "policy": self.policy, "seed": self.seed, "sampled": self.sampled,
                   "overall": self.overall, "categories": self.rows()}
        paths["results"].write_text(json.dumps(summary, indent=2) + "\n")
        paths["report"].write_text(f"# {self.env_id}, policy {self.policy}\n\n{self.markdown()}\n")
        paths["trajectories"].write_text("".join(t.to_json() + "\n" for t in trajectories))
        return paths


def choose_tasks(category: str, limit: int | None, seed: int) -> tuple[list[str], bool]:
    """The entries of `category` to run: all, or a sample of `limit` drawn with `seed` (in BFCL's order)."""
    ids = data.task_ids(category)
    if limit is None or limit >= len(ids):
        return ids, False
    chosen = set(random.Random(f"{seed}:{category}").sample(ids, limit))
    return [t for t in ids if t in chosen], True


def evaluate(env: Any, env_id: str, make_policy: Callable[[], Policy], policy_name: str, categories: list[str],
             *, limit: int | None = None, seed: int = 0,
             on_episode: Callable[[Trajectory], None] | None = None) -> tuple[CategoryTable, list[Trajectory]]:
    """Play every chosen entry of each category once with a fresh policy per episode; the per-category table
    and the trajectories (each with `reward_components` and the env's last `info["bfcl"]` verdict type)."""
    scores: list[CategoryScore] = []
    trajectories: list[Trajectory] = []
    sampled = False
    for category in categories:
        ids, cut = choose_tasks(category, limit, seed)
        sampled = sampled or cut
        score = CategoryScore(category, 0, 0, ids)
        for task_id in ids:
            trajectory = run_episode(env, make_policy(), seed=seed, options={"task_id": task_id})
            verdict = getattr(env.unwrapped, "last_verdict", None) or {}
            score.n += 1
            score.correct += int(trajectory.success)
            if not trajectory.success:
                kind = str(verdict.get("error_type") or "unknown")
                score.error_types[kind] = score.error_types.get(kind, 0) + 1
            trajectories.append(trajectory)
            if on_episode is not None:
                on_episode(trajectory)
        scores.append(score)
    return CategoryTable(env_id, policy_name, scores, sampled, seed), trajectories
