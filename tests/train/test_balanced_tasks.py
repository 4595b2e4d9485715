"""`balance_tasks_by`: every GRPO step draws each value of a task field (say the task's kind) in turn.

Why it exists: on the recipe's domain (lookups and aggregates) a step whose successes were all of one kind taught
the policy that kind's tool for both, and the other kind never succeeded again in that run
(docs/results/train_multiturn.md, "One kind takes over")."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.curriculum import balanced_task, task_strata, uniform_task
from envgym.train.policy import tiny_random_policy
from synth.pipeline import SynthConfig, run_pipeline
from synth.subsets import kind_subset

STRATA = {"aggregate": ["a0", "a1", "a2"], "lookup": ["l0", "l1", "l2", "l3", "l4"]}


def test_every_step_holds_each_stratum_and_each_stratum_comes_round_whole() -> None:
    draws = [balanced_task(STRATA, seed=1, index=i) for i in range(40)]
    for step in range(10):  # four tasks a step, two strata: two of each, every step
        kinds = Counter(d[0] for d in draws[4 * step : 4 * step + 4])
        assert kinds == {"a": 2, "l": 2}
    aggregates = [d for d in draws if d.startswith("a")]
    lookups = [d for d in draws if d.startswith("l")]
    for tasks, size in ((aggregates, 3), (lookups, 5)):  # a stratum's tasks all come before any comes again
        for start in range(0, len(tasks) - size + 1, size):
            assert sorted(tasks[start : start + size]) == sorted(tasks[:size])
    assert draws == [balanced_task(STRATA, seed=1, index=i) for i in range(40)]  # deterministic by seed
    assert draws != [balanced_task(STRATA, seed=2, index=i) for i in range(40)]


def test_one_stratum_is_the_uniform_sampler_with_its_own_stream() -> None:
    one = {"all": ["t0", "t1", "t2", "t3"]}
    draws = [balanced_task(one, seed=5, index=i) for i in range(8)]
    assert draws == [uniform_task(one["all"], 5 * 31, i) for i in range(8)]


def test_a_task_without_the_field_is_refused_by_name() -> None:
    tasks = [SimpleNamespace(id="t0", meta={"kind": "lookup"}), SimpleNamespace(id="t1", meta={"other": 1})]
    with pytest.raises(ValueError, match=r"task 't1' has no meta\['kind'\] \(its meta keys: \['other'\]\)"):
        task_strata(tasks, "kind")
    assert task_strata(tasks[:1], "kind") == {"lookup": ["t0"]}


def test_an_empty_field_name_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="balance_tasks_by"):
        GRPOConfig(model="tiny-random", output_dir=str(tmp_path), balance_tasks_by=" ")


@pytest.mark.slow
def test_the_trainer_rolls_out_both_kinds_every_step_and_never_a_heldout_task(tmp_path: Path) -> None:
    run_pipeline(SynthConfig(seed=1, domains=1, tasks_per_env=60, mechanism_share=0.0), tmp_path / "synth")
    (source,) = [p for p in (tmp_path / "synth").iterdir() if (p / "world.yaml").exists()]
    folder, _ = kind_subset(source, tmp_path / "suite", kinds=("lookup", "aggregate"), heldout=4, seed=0)
    data = load_environment(str(folder))
    config = GRPOConfig(model="tiny-random", output_dir=str(tmp_path / "run"), env_id="envgym/calculator-v0",
                        group_size=2, tasks_per_step=4, lockstep_groups=True, max_new_tokens=8,
                        max_sequence_tokens=1800, max_turns=1, heldout_tasks=4, seed=3, balance_tasks_by="kind")
    trainer = GRPOTrainer(config, policy=tiny_random_policy(seed=0), env_factory=lambda: ToolWorldEnv(data=data))
    kind = {t.id: t.meta["kind"] for t in data.tasks}
    assert set(trainer.task_strata or {}) == {"aggregate", "lookup"}
    for step in range(12):
        drawn = [trainer._task_for(i) for i in trainer.shard.step_indices(step)]
        assert Counter(kind[t] for t in drawn) == {"aggregate": 2, "lookup": 2}
        assert not set(drawn) & set(trainer.heldout_tasks)
    groups = trainer.rollout()  # the real path: the step's groups are of those tasks
    assert Counter(kind[g.task_id] for g in groups) == {"aggregate": 2, "lookup": 2}
    with pytest.raises(ValueError, match=r"balance_tasks_by='user': task '.+' has no meta\['user'\]"):
        GRPOTrainer(GRPOConfig(**{**config.__dict__, "balance_tasks_by": "user"}), policy=tiny_random_policy(seed=0),
                    env_factory=lambda: ToolWorldEnv(data=data))
