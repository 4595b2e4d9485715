"""`GRPOTrainer.train(max_seconds=...)` stops at the first step end past the budget."""

from __future__ import annotations

from pathlib import Path

from envgym.train import GRPOConfig, GRPOTrainer


def test_an_exhausted_time_budget_stops_after_one_step(tmp_path: Path) -> None:
    config = GRPOConfig(
        model="tiny-random",
        output_dir=str(tmp_path / "run"),
        group_size=2,
        tasks_per_step=1,
        max_new_tokens=8,
        max_sequence_tokens=700,
        max_turns=1,
        micro_batch_size=2,
        max_steps=5,
        save_every=0,
        heldout_tasks=2,
        seed=1,
    )
    trainer = GRPOTrainer(config)
    rows = trainer.train(max_seconds=0.0)
    assert len(rows) == 1
    assert trainer.step == 1
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-000001"]
