"""The reward-curve band stays inside the rewards' range."""

from __future__ import annotations

import json
from pathlib import Path

from envgym.train.plot import plot_reward_curve, reward_band


def test_band_is_clamped_to_the_lowest_and_highest_reward() -> None:
    low, high = reward_band([0.875, 0.125], [0.33, 0.33], [0.0, 0.0], [1.0, 1.0])
    assert low == [0.875 - 0.33, 0.0]
    assert high == [1.0, 0.125 + 0.33]


def test_curve_is_drawn_from_rows_with_and_without_reward_bounds(tmp_path: Path) -> None:
    rows = [
        {"step": 0, "reward_mean": 0.5, "reward_std": 0.5, "success_rate": 0.5},
        {"step": 1, "reward_mean": 0.9, "reward_std": 0.3, "success_rate": 0.9, "reward_min": 0.0, "reward_max": 1.0},
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    png = plot_reward_curve(metrics, tmp_path / "curve.png", reward_range=(0.0, 1.0))
    assert png is not None and png.read_bytes().startswith(b"\x89PNG")
