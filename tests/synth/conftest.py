"""A small synthesized suite, built once per test session (3 domains, 10 tasks per env)."""

from __future__ import annotations

from pathlib import Path

import pytest

from synth.pipeline import SynthConfig, run_pipeline

SMALL = SynthConfig(seed=3, domains=3, tasks_per_env=10)


@pytest.fixture(scope="session")
def small_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "suite"
    run_pipeline(SMALL, out)
    return out


@pytest.fixture(scope="session")
def small_config() -> SynthConfig:
    return SMALL
