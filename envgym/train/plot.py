"""The reward-curve PNG of a training run, drawn from its metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path


def plot_reward_curve(metrics_path: Path, png_path: Path) -> Path | None:
    """Plot reward mean (with +-std band) and success rate per step; None when there are no rows."""
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
    ax.fill_between(
        steps,
        [m - s for m, s in zip(mean, std, strict=True)],
        [m + s for m, s in zip(mean, std, strict=True)],
        alpha=0.2,
    )
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
