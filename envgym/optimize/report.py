"""An optimization run on disk: best_prompt.txt, front.json, events.jsonl (raw), report.md and report.png."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from envgym.optimize.pareto import best_on, mean_score
from envgym.optimize.search import OptimizeResult


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a success rate (sensible at 0/n and n/n, unlike the normal one)."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def front_rows(result: OptimizeResult) -> list[dict[str, Any]]:
    """One row per front candidate: its id, origin, parents, mean train score, the tasks it is best on, its text."""
    wins = best_on(result.scores, result.train)
    return [{"id": c, "origin": result.candidate(c).origin, "parents": list(result.candidate(c).parents),
             "train_mean": mean_score(result.scores, c, result.train), "best_on": wins[c],
             "system": result.candidate(c).system_text()} for c in result.front]


def _rate(flags: list[bool]) -> str:
    low, high = wilson(sum(flags), len(flags))
    return f"{sum(flags)}/{len(flags)} (95% CI {low:.2f}-{high:.2f})"


def markdown(result: OptimizeResult, command: str | None = None) -> str:
    cfg = result.config
    counts: dict[str, int] = {}
    for e in result.events:
        counts[e["event"]] = counts.get(e["event"], 0) + 1
    lines = [f"# Prompt optimization: {result.env} ({'ACE playbook' if cfg.playbook else 'GEPA prompt'})", ""]
    if command:
        lines += ["```", command, "```", ""]
    lines += [
        f"{cfg.iterations} iterations, minibatch {cfg.minibatch}, merge every {cfg.merge_every or 'never'}, "
        f"seed {cfg.seed}. Train tasks ({len(result.train)}): {', '.join(result.train)}. Held-out tasks "
        f"({len(result.heldout)}, disjoint): {', '.join(result.heldout)}.", "",
        "| held-out success | seed prompt | best candidate |", "|---|---|---|",
        f"| {result.best} vs c0 | {_rate(result.heldout_before)} | {_rate(result.heldout_after)} |", "",
        "Events: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + ".", "",
        "## Candidates (mean reward on the training tasks)", "", "| id | origin | parents | train mean | on front |",
        "|---|---|---|---|---|",
        *(f"| {c.id} | {c.origin} | {', '.join(c.parents) or '-'} | {mean_score(result.scores, c.id, result.train):.2f}"
          f" | {'yes' if c.id in result.front else 'no'} |" for c in result.candidates), "",
        "## Rejected or unused reflections", "",
        *(f"- iteration {e['iteration']}: {e['event']}: {e.get('reason') or 'child did not beat its parent'}"
          for e in result.events if e["event"] in ("rejected", "not_better")), "",
        f"## Best candidate ({result.best})", "", "```", result.candidate(result.best).system_text(), "```", "",
    ]
    return "\n".join(lines)


def chart(result: OptimizeResult, path: Path) -> None:
    """Left: each candidate's mean train reward (front in colour); right: held-out success before and after with
    95% intervals."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    ids = [c.id for c in result.candidates]
    left.bar(ids, [mean_score(result.scores, c, result.train) for c in ids],
             color=["tab:green" if c in result.front else "tab:gray" for c in ids])
    left.set(ylim=(0, 1.05), ylabel="mean train reward", title="candidates (green: Pareto front)")
    rates: list[float] = []
    errors: list[list[float]] = [[], []]
    for flags in (result.heldout_before, result.heldout_after):
        rate = sum(flags) / len(flags) if flags else 0.0
        low, high = wilson(sum(flags), len(flags))
        rates.append(rate)
        errors[0].append(rate - low)
        errors[1].append(high - rate)
    right.bar(["seed (c0)", f"best ({result.best})"], rates, yerr=errors, capsize=6, color=["tab:gray", "tab:blue"])
    right.set(ylim=(0, 1.05), ylabel="held-out success", title=f"{result.env}: held-out, 95% Wilson")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_result(result: OptimizeResult, out_dir: str | Path, command: str | None = None) -> dict[str, Path]:
    """Write the run's files into `out_dir`; returns their paths by name."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {name: out / name for name in ("best_prompt.txt", "front.json", "events.jsonl", "report.md",
                                           "report.png")}
    paths["best_prompt.txt"].write_text(result.candidate(result.best).system_text() + "\n")
    paths["front.json"].write_text(json.dumps(front_rows(result), indent=1, ensure_ascii=False) + "\n")
    paths["events.jsonl"].write_text("".join(json.dumps(e, ensure_ascii=False, sort_keys=True) + "\n"
                                             for e in result.events))
    paths["report.md"].write_text(markdown(result, command))
    chart(result, paths["report.png"])
    return paths
