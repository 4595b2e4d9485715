"""End-to-end GRPO on envgym/calculator-v0 with a tiny randomly initialised model (CI-sized)."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from envgym.play.episode import Trajectory
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.policy import tiny_random_policy
from envgym.train.rollout import Group, StaleSampleError, TokenTrajectory
from envgym.train.tokens import TokenSample

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, **overrides: Any) -> GRPOConfig:
    base: dict[str, Any] = dict(
        model="tiny-random",
        output_dir=str(tmp_path / "run"),
        group_size=4,
        tasks_per_step=1,
        max_new_tokens=12,
        max_sequence_tokens=700,
        max_turns=2,
        micro_batch_size=4,
        learning_rate=1e-3,
        max_steps=2,
        save_every=1,
        heldout_tasks=2,
        seed=3,
    )
    base.update(overrides)
    return GRPOConfig(**base)


class RandomReward:
    """Distinct rewards per episode so no group is zero-variance (a random policy never solves the task)."""

    name = "random"

    def __init__(self) -> None:
        self.generator = torch.Generator().manual_seed(0)

    def score(self, episodes: Sequence[Trajectory]) -> list[float]:
        return torch.rand(len(episodes), generator=self.generator).tolist()


def test_trains_writes_metrics_and_resumes(tmp_path: Path) -> None:
    policy = tiny_random_policy(seed=3)
    before = {k: v.clone() for k, v in policy[0].state_dict().items()}
    trainer = GRPOTrainer(_config(tmp_path), policy=policy, reward_source=RandomReward())
    rows = trainer.train()
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        assert row["updated"] == 1.0 and math.isfinite(row["loss"]) and math.isfinite(row["grad_norm"])
        for key in (
            "reward_mean",
            "reward_std",
            "frac_zero_std_groups",
            "tool_call_frequency",
            "tool_failure_frequency",
            "kl",
            "clip_fraction",
            "tokens_per_s",
        ):
            assert key in row
    changed = [k for k, v in policy[0].state_dict().items() if not torch.equal(v, before[k])]
    assert changed
    run = tmp_path / "run"
    assert (run / "reward_curve.png").stat().st_size > 0
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-000001", "checkpoint-000002"]
    weights_at_2 = {k: v.clone() for k, v in policy[0].state_dict().items()}
    # sampler='uniform' (the default) is the order the trainer has always used, pinned from before PCL existed.
    assert [trainer._task_for(i) for i in range(4)] == ["mul_040", "mul_155", "mul_121", "mul_059"]
    assert [g.task_id for g in trainer.last_groups] == ["mul_155"]
    assert trainer.curriculum is None and not any(key.startswith("pcl") for row in rows for key in row)
    assert not list(run.glob("checkpoint-*/curriculum.pt"))

    resumed_policy = tiny_random_policy(seed=99)  # different init: resume must restore the weights
    resumed = GRPOTrainer(
        _config(tmp_path, max_steps=3, resume_from="latest"),
        policy=resumed_policy,
        reward_source=RandomReward(),
    )
    resumed.load_checkpoint("latest")
    assert all(torch.equal(v, weights_at_2[k]) for k, v in resumed_policy[0].state_dict().items())
    more = resumed.train()
    assert [r["step"] for r in more] == [2]
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [0, 1, 2]
    assert lines[2]["policy_version"] == 2
    # The saved samples: every episode of every step (4 a step), none twice after the resume, readable by the viewer.
    from envgym.view.records import read_records

    saved = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert [r["step"] for r in saved] == [0] * 4 + [1] * 4 + [2] * 4
    assert saved[8]["policy_version"] == 2 and saved[8]["task_id"] == resumed.last_groups[0].task_id
    assert all(r["env_name"] == "calculator" and r["messages"][0]["role"] == "system" for r in saved)
    assert all(0.0 <= r["training_reward"] <= 1.0 for r in saved)  # RandomReward's draws
    records = read_records(run / "rollouts.jsonl")
    assert len(records) == 12 and records[0].env == "calculator"


def test_pcl_sampler_trains_and_resumes_its_value_head(tmp_path: Path) -> None:
    model, tokenizer = tiny_random_policy(seed=3)
    config = _config(tmp_path, sampler="pcl", pcl_candidates=3, group_size=2, max_steps=1, max_new_tokens=4,
                     max_turns=1)
    trainer = GRPOTrainer(config, policy=(model, tokenizer), reward_source=RandomReward())
    rows = trainer.train()
    assert rows[0]["pcl_explored"] == 1.0 and math.isfinite(rows[0]["pcl_value_loss"])
    candidates = [trainer._task_for(i) for i in range(3)]  # step 0's window of the uniform order
    assert trainer.last_groups[0].task_id in candidates
    assert trainer.curriculum is not None and len(trainer.curriculum.buffer) == 1
    saved = trainer.curriculum.state_dict()
    assert (tmp_path / "run" / "checkpoint-000001" / "curriculum.pt").exists()

    resumed = GRPOTrainer(config, policy=(copy.deepcopy(model), tokenizer), reward_source=RandomReward())
    resumed.load_checkpoint("latest")
    assert resumed.curriculum is not None
    restored = resumed.curriculum.state_dict()
    for name, tensor in saved["head"].items():
        assert torch.equal(restored["head"][name], tensor), name
    assert restored["seen"] == saved["seen"] and len(restored["buffer"]) == 1
    assert torch.equal(restored["buffer"][0][1], saved["buffer"][0][1])


def test_pcl_with_async_rollouts_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="sampler='pcl' needs async_rollouts=False"):
        _config(tmp_path, sampler="pcl", async_rollouts=True)


def test_lockstep_groups_roll_out_the_same_tasks_and_seeds_in_one_batch(tmp_path: Path) -> None:
    by_group = GRPOTrainer(_config(tmp_path / "a", tasks_per_step=3, group_size=2), policy=tiny_random_policy(seed=3))
    lockstep = GRPOTrainer(_config(tmp_path / "b", tasks_per_step=3, group_size=2, lockstep_groups=True),
                           policy=tiny_random_policy(seed=3))
    assert len(by_group.envs) == 2 and len(lockstep.envs) == 6  # one env per episode of the step
    sessions: list[int] = []
    open_session = lockstep.sampler.session
    lockstep.sampler.session = lambda: (sessions.append(1), open_session())[1]
    expected, got = by_group.rollout(), lockstep.rollout()
    assert len(sessions) == 1  # one lockstep batch for the three groups (group by group: one session each)
    assert [g.task_id for g in got] == [g.task_id for g in expected]
    assert [[e.seed for e in g.episodes] for g in got] == [[e.seed for e in g.episodes] for g in expected]
    assert all(len(g.rewards) == 2 for g in got)
    # Evaluation keeps its chunks of group_size tasks (and their env seeds) whatever the env count.
    assert lockstep.evaluate() == by_group.evaluate()


def test_env_reward_on_zero_variance_groups_skips_the_update(tmp_path: Path) -> None:
    # A random 2-layer model never answers the calculator correctly: every reward is 0, every group is
    # zero-variance, and the trainer must not touch the weights.
    policy = tiny_random_policy(seed=4)
    before = {k: v.clone() for k, v in policy[0].state_dict().items()}
    trainer = GRPOTrainer(_config(tmp_path, max_steps=1, save_every=0), policy=policy)
    rows = trainer.train()
    assert rows[0]["frac_zero_std_groups"] == 1.0 and rows[0]["updated"] == 0.0
    assert rows[0]["policy_version"] == 0
    assert all(torch.equal(v, before[k]) for k, v in policy[0].state_dict().items())


def test_async_lora_run_with_kl(tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        async_rollouts=True,
        max_staleness=1,
        buffer_size=2,
        use_lora=True,
        lora_target_modules=["q_proj", "v_proj"],
        beta=0.1,
        max_steps=2,
        save_every=0,
    )
    trainer = GRPOTrainer(config, policy=tiny_random_policy(seed=5), reward_source=RandomReward())
    rows = trainer.train()
    assert len(rows) == 2
    assert all(r["max_staleness_seen"] <= 1 and math.isfinite(r["loss"]) for r in rows)
    assert rows[-1]["kl"] >= 0.0
    assert (tmp_path / "run" / "checkpoint-000002" / "model.pt").exists()


def _sample(tokens: int, policy_version: int = 0) -> TokenSample:
    sample = TokenSample(policy_version=policy_version)
    sample.extend([1, 2, 3, 4], 0)
    sample.extend(list(range(10, 10 + tokens)), 1, [-1.0] * tokens)
    return sample


def test_async_lockstep_rollouts_are_the_sync_steps_groups_at_most_one_update_old(tmp_path: Path) -> None:
    # Step k + 1's groups are rolled out (in one lockstep batch) while the learner updates on step k: the same
    # tasks and seeds as a synchronous run, each sample stamped with the version that sampled it.
    config = _config(tmp_path, async_rollouts=True, lockstep_groups=True, max_staleness=1, tasks_per_step=2,
                     group_size=2, max_steps=3, save_every=0)
    trainer = GRPOTrainer(config, policy=tiny_random_policy(seed=5), reward_source=RandomReward())
    seen: list[tuple[int, list[str], list[list[int]], list[int]]] = []
    update = trainer._update

    def recording_update(groups: list[Group]) -> dict[str, float]:
        versions = [s.policy_version for g in groups for e in g.episodes for s in e.samples]
        seen.append((trainer.version, [g.task_id for g in groups], [[e.seed for e in g.episodes] for g in groups],
                     versions))
        return update(groups)

    trainer._update = recording_update  # type: ignore[method-assign]
    rows = trainer.train()
    assert [r["updated"] for r in rows] == [1.0, 1.0, 1.0]
    assert all(r["max_staleness_seen"] <= 1 and r["dropped_stale"] == 0 for r in rows)
    for step, (version, tasks, seeds, versions) in enumerate(seen):
        indices = [2 * step, 2 * step + 1]
        assert tasks == [trainer._task_for(i) for i in indices]
        assert seeds == [[3 * 100_003 + i + j for j in range(2)] for i in indices]
        assert versions and all(0 <= version - v <= 1 for v in versions)
    assert rows[-1]["stale_samples"] == sum(version - v for version, *_, vs in seen[-1:] for v in vs)


@pytest.mark.parametrize(("async_rollouts", "sampled_at"), [(False, 1), (True, 0)])
def test_the_learner_refuses_a_sample_older_than_the_staleness_bound(
    tmp_path: Path, async_rollouts: bool, sampled_at: int
) -> None:
    # The learner is at version 2. Sync accepts only version 2; async with max_staleness 1 also version 1.
    trainer = GRPOTrainer(_config(tmp_path, group_size=2, async_rollouts=async_rollouts, max_staleness=1),
                          policy=tiny_random_policy(seed=6), reward_source=RandomReward())
    trainer.version = 2
    stale = [TokenTrajectory("calculator", "t", [], [], samples=[_sample(3, sampled_at)]) for _ in range(2)]
    with pytest.raises(StaleSampleError, match=f"policy version {sampled_at}, but the learner is at version 2"):
        trainer._update([Group("t", stale, sampled_at, rewards=[1.0, 0.0])])
    fresh_version = 1 if async_rollouts else 2
    fresh = [TokenTrajectory("calculator", "t", [], [], samples=[_sample(3, fresh_version)]) for _ in range(2)]
    stats = trainer._update([Group("t", fresh, fresh_version, rewards=[1.0, 0.0])])
    assert stats["updated"] == 1.0 and stats["stale_samples"] == (2.0 if async_rollouts else 0.0)


def test_grpo_reduction_counts_a_split_episode_once(tmp_path: Path) -> None:
    # Rewards 1 and 0 give advantages +1 and -1; with pi_old = pi and no TIS every token's loss is -A, so the
    # per-episode means are -1 and +1 and the "grpo" loss is their mean, 0, however episode 0 was split.
    trainer = GRPOTrainer(
        _config(tmp_path, loss_type="grpo", tis_cap=None, group_size=2),
        policy=tiny_random_policy(seed=6),
        reward_source=RandomReward(),
    )
    split = TokenTrajectory("calculator", "t", [], [], samples=[_sample(3), _sample(5)])
    whole = TokenTrajectory("calculator", "t", [], [], samples=[_sample(4)])
    stats = trainer._update([Group("t", [split, whole], 0, rewards=[1.0, 0.0])])
    assert stats["updated"] == 1.0 and stats["samples"] == 3.0
    assert abs(stats["loss"]) < 1e-6


@pytest.mark.parametrize(("weight", "loss"), [(1.0, 0.0), (0.25, -0.375), (0.0, -0.5)])
def test_the_negative_advantage_weight_reaches_the_loss(tmp_path: Path, weight: float, loss: float) -> None:
    # Advantages +1 and -1 become +1 and -weight; every token's loss is -A, so the "grpo" loss is (weight - 1) / 2.
    trainer = GRPOTrainer(
        _config(tmp_path, loss_type="grpo", tis_cap=None, group_size=2, negative_advantage_weight=weight),
        policy=tiny_random_policy(seed=6),
        reward_source=RandomReward(),
    )
    episodes = [TokenTrajectory("calculator", "t", [], [], samples=[_sample(n)]) for n in (3, 4)]
    stats = trainer._update([Group("t", episodes, 0, rewards=[1.0, 0.0])])
    assert stats["updated"] == 1.0 and stats["loss"] == pytest.approx(loss, abs=1e-6)


def test_kl_reference_is_the_policy_as_grpo_starts(tmp_path: Path) -> None:
    policy = tiny_random_policy(seed=8)
    trainer = GRPOTrainer(
        _config(tmp_path, beta=0.1, max_steps=1, save_every=0), policy=policy, reward_source=RandomReward()
    )
    with torch.no_grad():  # a warm start between construction and GRPO (as experiments/train_calculator.py does)
        for parameter in policy[0].parameters():
            parameter.add_(0.01)
    warm = {k: v.clone() for k, v in policy[0].state_dict().items()}
    trainer.train()
    reference = trainer.reference.state_dict()
    assert all(torch.equal(reference[k], v) for k, v in warm.items())


def test_a_bfloat16_learner_makes_the_float32_update_to_bfloat16_precision(tmp_path: Path) -> None:
    # The same step (rewards 1, 0 and 0.5; a KL reference; TIS on) with both learner precisions, from the same
    # weights: the weights stay float32 and move in the same direction by the same amount.
    deltas, stats = {}, {}
    for dtype in ("float32", "bfloat16"):
        policy = tiny_random_policy(seed=6)
        before = torch.cat([p.detach().flatten().clone() for p in policy[0].parameters()])
        trainer = GRPOTrainer(
            _config(tmp_path / dtype, beta=0.1, group_size=3, learner_dtype=dtype, learning_rate=1e-4),
            policy=policy, reward_source=RandomReward(),
        )
        trainer.freeze_reference()
        episodes = [TokenTrajectory("calculator", "t", [], [], samples=[_sample(n)]) for n in (3, 5, 4)]
        stats[dtype] = trainer._update([Group("t", episodes, 0, rewards=[1.0, 0.0, 0.5])])
        assert all(p.dtype == torch.float32 for p in policy[0].parameters())
        deltas[dtype] = torch.cat([p.detach().flatten() for p in policy[0].parameters()]).double() - before.double()
    assert stats["bfloat16"]["updated"] == 1.0
    assert torch.linalg.vector_norm(deltas["bfloat16"]) > 0
    assert torch.nn.functional.cosine_similarity(deltas["float32"], deltas["bfloat16"], dim=0) > 0.95
    assert abs(stats["float32"]["grad_norm"] - stats["bfloat16"]["grad_norm"]) < 0.05 * stats["float32"]["grad_norm"]
