"""Data-parallel learning is exact: 2 gloo ranks taking one update step from the same groups give the loss and
the parameters of one process, for every loss type (issue 18, part 1); the ranks roll out disjoint shares of a
step's groups that together are the groups one process rolls out, and agree on the policy version (part 2)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp

from envgym.train import GRPOConfig, GRPOTrainer, distributed
from envgym.train.policy import tiny_random_policy
from envgym.train.rollout import Group, TokenTrajectory
from envgym.train.tokens import TokenSample

pytestmark = pytest.mark.slow

LOSS_TYPES = ("grpo", "bnpo", "dapo", "dr_grpo")


def _config(tmp_path: Path, loss_type: str) -> GRPOConfig:
    return GRPOConfig(
        model="tiny-random",
        output_dir=str(tmp_path / loss_type),
        group_size=2,
        max_new_tokens=12,
        max_sequence_tokens=64,
        max_turns=2,
        # bnpo normalises per micro-batch: one sample each keeps the micro-batches the same sets on 1 or 2 ranks.
        micro_batch_size=1 if loss_type == "bnpo" else 2,
        learning_rate=1e-2,
        heldout_tasks=2,
        loss_type=loss_type,  # type: ignore[arg-type]
        tis_cap=2.0,
        seed=3,
    )


def _sample(generator: torch.Generator, tokens: int) -> TokenSample:
    sample = TokenSample()
    sample.extend([1, 2, 3, 4], 0)  # a shared prompt prefix
    sample.extend(torch.randint(10, 400, (3,), generator=generator).tolist(), 0)
    ids = torch.randint(10, 400, (tokens,), generator=generator).tolist()
    sample.extend(ids, 1, (-torch.rand(tokens, generator=generator)).tolist())
    return sample


def _groups() -> list[Group]:
    """Five groups of two episodes with uneven lengths (rank 0 gets three, rank 1 two); an episode split into
    two samples; group 3 has equal rewards (no signal: left out, yet the other rank must not count it)."""
    generator = torch.Generator().manual_seed(11)
    groups = []
    for index, (lengths, rewards) in enumerate(
        [([[5], [9]], [1.0, 0.0]), ([[3, 6], [7]], [0.2, 0.9]), ([[12], [4]], [0.5, 0.1]),
         ([[8], [2]], [0.3, 0.3]), ([[6], [10, 3]], [0.0, 0.7])]
    ):
        episodes = [TokenTrajectory("calculator", f"t{index}", [], [], samples=[_sample(generator, n) for n in ns])
                    for ns in lengths]
        groups.append(Group(f"t{index}", episodes, 0, rewards=rewards))
    return groups


def _step(tmp_path: Path, loss_type: str) -> dict[str, Any]:
    trainer = GRPOTrainer(_config(tmp_path, loss_type), policy=tiny_random_policy(seed=6))
    stats = trainer._update(distributed.shard(_groups()))  # each rank learns from its share
    return {"stats": stats, "params": {k: v.detach().clone() for k, v in trainer.model.named_parameters()}}


def _rollout(tmp_path: Path) -> list[tuple[str, int, list[list[int]]]]:
    """This rank's groups of step 1 with 3 groups per step (uneven over 2 ranks): task, version, token ids."""
    config = GRPOConfig(model="tiny-random", output_dir=str(tmp_path / "rollout"), group_size=2, tasks_per_step=3,
                        max_new_tokens=6, max_sequence_tokens=512, max_turns=1, heldout_tasks=2, seed=3)
    trainer = GRPOTrainer(config, policy=tiny_random_policy(seed=6))
    trainer.step = 1
    return [(g.task_id, g.policy_version, [s.token_ids for e in g.episodes for s in e.samples])
            for g in trainer.rollout()]


def _rank(index: int, world: int, init_file: str, tmp: str) -> None:
    torch.set_num_threads(1)
    os.environ.update(RANK=str(index), WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", init_method=f"file://{init_file}", rank=index, world_size=world)
    try:
        assert distributed.active() and distributed.rank() == index
        results: dict[str, Any] = {loss: _step(Path(tmp) / f"rank{index}", loss) for loss in LOSS_TYPES}
        results["rollout"] = _rollout(Path(tmp) / f"rank{index}")
        try:  # each rank claims a different version: every rank must refuse to go on
            distributed.check_same("policy version", [7, index])
            results["disagreement"] = None
        except RuntimeError as error:
            results["disagreement"] = str(error)
        torch.save(results, Path(tmp) / f"rank{index}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("ddp")
    context = mp.start_processes(
        _rank, args=(2, str(tmp / "init"), str(tmp)), nprocs=2, join=False, start_method="spawn"
    )
    import time

    deadline = time.monotonic() + 600  # generous: the machine is shared and loaded
    while not context.join(timeout=5):
        if time.monotonic() > deadline:
            for process in context.processes:
                process.kill()
            pytest.fail("2-rank gloo run did not finish in 600 s")
    return [torch.load(tmp / f"rank{r}.pt") for r in range(2)]


def test_shard_keeps_groups_whole_and_covers_them() -> None:
    items = list(range(5))
    shards = [distributed.shard(items, r, 2) for r in range(2)]
    assert shards == [[0, 1, 2], [3, 4]]
    assert [distributed.shard(items, r, 7) for r in range(7)] == [[0], [1], [2], [3], [4], [], []]
    with pytest.raises(ValueError, match="rank 2 outside"):
        distributed.shard(items, 2, 2)


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_two_gloo_ranks_match_one_process(two_ranks: list[dict[str, Any]], loss_type: str, tmp_path: Path) -> None:
    single = _step(tmp_path, loss_type)
    ranks = [r[loss_type] for r in two_ranks]
    assert single["stats"]["updated"] == 1.0
    for result in ranks:
        for key in ("loss", "kl", "clip_fraction", "is_weight", "grad_norm"):
            assert result["stats"][key] == pytest.approx(single["stats"][key], rel=1e-4, abs=1e-6), key
        for key in ("samples", "episodes", "trainable_tokens"):
            assert result["stats"][key] == single["stats"][key], key
    moved = 0.0
    initial = {k: v.detach() for k, v in tiny_random_policy(seed=6)[0].named_parameters()}
    for name, expected in single["params"].items():
        moved = max(moved, float((expected - initial[name]).abs().max()))
        for result in ranks:
            # atol: 1e-3 of one Adam step (lr 1e-2); summing in another order moves near-zero gradients' steps.
            torch.testing.assert_close(result["params"][name], expected, rtol=1e-4, atol=1e-5)
    assert moved > 1e-4  # the step changed the weights, so equal parameters say something


def test_two_ranks_roll_out_disjoint_shares_that_are_the_groups_of_one_process(
    two_ranks: list[dict[str, Any]], tmp_path: Path
) -> None:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks: the same float sums, so the same sampled tokens
    try:
        single = _rollout(tmp_path)
    finally:
        torch.set_num_threads(threads)
    shares = [r["rollout"] for r in two_ranks]
    assert [len(s) for s in shares] == [2, 1]  # 3 groups: rank 0 takes the extra one
    assert shares[0] + shares[1] == single
    assert len({task for task, _, _ in single}) > 1 and all(ids for _, _, ids in single)


def test_ranks_that_disagree_on_the_policy_version_both_stop(two_ranks: list[dict[str, Any]]) -> None:
    for result in two_ranks:
        assert result["disagreement"] is not None
        assert "disagree on policy version" in result["disagreement"]


def test_torchrun_train_on_two_ranks_resumes_into_one_process(tmp_path: Path) -> None:
    # `envgym train` under torchrun: 2 gloo ranks, each with its own async rollout worker over its share of
    # the calculator-v0 groups, learn from their shards; rank 0 alone writes metrics and checkpoints, and one
    # process (synchronous rollouts) resumes from that checkpoint.
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    settings = [f"--set={s}" for s in (
        "model=tiny-random", f"output_dir={out}", "group_size=2", "tasks_per_step=2", "max_new_tokens=8",
        "max_turns=1", "heldout_tasks=2", "save_every=1",
        "zero_std_tolerance=-1",  # a random policy earns reward 0 everywhere: keep the groups so steps update
    )]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    two = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "envgym.cli", "train", *settings, "--set=max_steps=2", "--set=async_rollouts=true",
           "--set=buffer_size=1", "--set=max_staleness=1", "--json"]
    done = subprocess.run(two, capture_output=True, text=True, timeout=600, env=env, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]  # one row per step: rank 1 wrote none
    assert all(r["updated"] == 1.0 and r["episodes"] == 4.0 for r in rows)  # both ranks' shards counted
    # Each rank rolled out its own group of the two, not both (before, every rank rolled out the whole step).
    assert all(r["rollout_groups_per_rank"] == [1, 1] for r in rows)
    assert all(0 <= r["max_staleness_seen"] <= 1 for r in rows)  # the bound, over both ranks' groups
    one = [sys.executable, "-m", "envgym.cli", "train", *settings, "--set=max_steps=3", "--set=resume_from=latest",
           "--json"]
    done = subprocess.run(one, capture_output=True, text=True, timeout=600, env=env, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert summary["steps"] == 3 and summary["last"]["policy_version"] == 2
    assert (out / "checkpoint-000003").is_dir()
