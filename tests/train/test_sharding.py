"""Rollouts across ranks, the pure logic (issue 18, part 2): which groups each rank rolls out, and the metrics
row gathered from every rank's groups. The 2-process checks are in test_distributed.py."""

from __future__ import annotations

import pytest

from envgym.train import distributed
from envgym.train.distributed import GroupShard, share_bounds
from envgym.train.rollout import Group, TokenTrajectory
from envgym.train.step_metrics import GroupSummary, RankRollouts, rollout_metrics


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7])
@pytest.mark.parametrize("count", [0, 1, 2, 3, 5, 8, 13])
def test_shares_partition_the_items_in_rank_order_and_differ_by_at_most_one(count: int, ranks: int) -> None:
    bounds = [share_bounds(count, r, ranks) for r in range(ranks)]
    assert [i for start, stop in bounds for i in range(start, stop)] == list(range(count))
    sizes = [stop - start for start, stop in bounds]
    assert max(sizes) - min(sizes) <= 1
    assert sizes == sorted(sizes, reverse=True)  # the rule: the first count % ranks ranks take one more


def test_uneven_counts_follow_the_stated_rule() -> None:
    assert [share_bounds(3, r, 2) for r in range(2)] == [(0, 2), (2, 3)]
    assert [share_bounds(1, r, 3) for r in range(3)] == [(0, 1), (1, 1), (1, 1)]  # ranks 1, 2 idle


def test_bad_rank_or_count_is_named() -> None:
    with pytest.raises(ValueError, match="rank 2 outside"):
        share_bounds(4, 2, 2)
    with pytest.raises(ValueError, match="0 ranks"):
        share_bounds(4, 0, 0)
    with pytest.raises(ValueError, match="negative count"):
        share_bounds(-1, 0, 1)


@pytest.mark.parametrize(("per_step", "ranks"), [(1, 1), (2, 2), (3, 2), (5, 3), (2, 4)])
def test_every_step_is_partitioned_into_whole_groups_as_one_process_rolls_them_out(per_step: int, ranks: int) -> None:
    one = GroupShard.for_rank(per_step, 0, 1)
    shards = [GroupShard.for_rank(per_step, r, ranks) for r in range(ranks)]
    for step in range(4):
        assert [i for s in shards for i in s.step_indices(step)] == one.step_indices(step)
    # Deterministic: the same rank and count always give the same shard.
    assert shards == [GroupShard.for_rank(per_step, r, ranks) for r in range(ranks)]


def test_a_rank_without_groups_has_no_indices() -> None:
    shard = GroupShard.for_rank(1, 1, 2)
    assert shard.size == 0 and shard.step_indices(3) == []


def test_collectives_are_the_identity_in_one_process() -> None:
    assert not distributed.active()
    assert distributed.all_gather({"a": 1}) == [{"a": 1}]
    distributed.check_same("step", [3, 4])  # nothing to disagree with
    assert GroupShard.for_rank(3) == GroupShard(3, 0, 3)


def _group(index: int, rewards: list[float], version: int) -> Group:
    episodes = []
    for j, reward in enumerate(rewards):
        episode = TokenTrajectory("calculator", f"t{index}", [], [], reward=reward,
                                  steps=2 + j, tool_calls=1 + index, sampled_tokens=10 * (j + 1))
        episodes.append(episode)
    return Group(f"t{index}", episodes, version, rewards=rewards)


def test_metrics_over_two_ranks_equal_those_over_one_rank_holding_every_group() -> None:
    groups = [_group(0, [1.0, 0.0], 4), _group(1, [0.5, 0.5], 3), _group(2, [0.2, 0.9], 4)]
    summaries = [GroupSummary.of(g) for g in groups]
    one = rollout_metrics([RankRollouts(summaries, 2.0, 1)], version=4, zero_std_tolerance=1e-6)
    two = rollout_metrics(
        [RankRollouts(summaries[:2], 2.0, 1), RankRollouts(summaries[2:], 1.5, 0)], version=4, zero_std_tolerance=1e-6
    )
    assert one.pop("rollout_groups_per_rank") == [3] and two.pop("rollout_groups_per_rank") == [2, 1]
    assert two == pytest.approx(one)
    assert two["max_staleness_seen"] == 1 and two["frac_zero_std_groups"] == pytest.approx(1 / 3)
    assert two["reward_mean"] == pytest.approx(3.1 / 6) and two["success_rate"] == pytest.approx(1 / 6)
    # The step waits for the slowest rank: throughput is every rank's tokens over that time.
    assert two["rollout_s"] == 2.0 and two["tokens_per_s"] == pytest.approx(90 / 2.0)
