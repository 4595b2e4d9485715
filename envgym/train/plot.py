"""The reward-curve PNG of a training run, drawn from its metrics.jsonl."""

from __future__ import annotations

import json
import math
from pathlib import Path


def reward_band(
    mean: list[float], std: list[float], lowest: list[float], highest: list[float]
) -> tuple[list[float], list[float]]:
    """mean +- std clamped to the range rewards can take (a band past it shows rewards that cannot occur)."""
    low = [max(m - s, lo) for m, s, lo in zip(mean, std, lowest, strict=True)]
    high = [min(m + s, hi) for m, s, hi in zip(mean, std, highest, strict=True)]
    return low, high


def plot_reward_curve(
    metrics_path: Path, png_path: Path, reward_range: tuple[float, float] | None = None
) -> Path | None:
    """Plot reward mean (with a +-std band clamped to the step's lowest and highest reward, or to
    `reward_range` for rows that do not record them) and success rate per step; None when there are no rows."""
    if not metrics_path.exists():
        return None
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r["step"] for r in rows]
    mean = [r["reward_mean"] for r in rows]
    std = [r["reward_std"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.plot(steps, mean, label="reward mean")
    lowest, highest = reward_range if reward_range is not None else (-math.inf, math.inf)
    low, high = reward_band(mean, std, [r.get("reward_min", lowest) for r in rows],
                            [r.get("reward_max", highest) for r in rows])
    ax.fill_between(steps, low, high, alpha=0.2)
    ax.plot(steps, [r["success_rate"] for r in rows], label="success rate", linestyle="--")
    ax.set_xlabel("step")
    ax.set_ylabel("reward")
    ax.set_title(f"GRPO reward ({metrics_path.parent.name})")
    ax.legend()
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path
