"""benchmarks/soak.py's memory verdict: a level that rises after warm-up is growth; a server swinging as it frees
memory back to the system is not."""

from __future__ import annotations

from benchmarks.soak import rss_verdict


def _samples(values: list[float]) -> list[tuple[float, float]]:
    return [(5.0 * i, mb) for i, mb in enumerate(values)]


def test_a_swing_that_returns_is_not_growth() -> None:
    swinging = _samples([250.0 + (20.0 if i % 4 == 0 else 0.0) for i in range(48)])  # +20 MB every 20 s
    verdict = rss_verdict(swinging)
    assert verdict["growth_pct"] < 2.0, verdict
    assert verdict["spike_pct"] >= 7.9, verdict  # the swing is still reported


def test_a_level_that_keeps_rising_is_growth() -> None:
    creeping = _samples([250.0 + 0.6 * i for i in range(48)])  # +7 MB a minute, the old soak's creep
    verdict = rss_verdict(creeping)
    # 19 MB (7.5%) of rise after warm-up; the windows cost at most half a window of it (15 s: 1.8 MB).
    assert verdict["growth_pct"] > 6.5, verdict
