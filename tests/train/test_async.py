"""The async buffer: a real worker thread, a learner that bumps versions, and the staleness bound."""

from __future__ import annotations

import time

import pytest

from envgym.train.rollout import Group, GroupBuffer, RolloutWorker


@pytest.mark.parametrize("max_staleness", [0, 1, 2])
def test_no_group_older_than_max_staleness_reaches_the_learner(max_staleness: int) -> None:
    loaded: list[int] = []
    buffer = GroupBuffer(capacity=4, max_staleness=max_staleness)
    worker = RolloutWorker(
        buffer,
        make_group=lambda index, version: Group(f"task-{index}", [], version),
        load_weights=loaded.append,
    )
    worker.start()
    time.sleep(0.3)  # let the worker fill the buffer with version-0 groups
    version = 0
    consumed: list[tuple[int, int]] = []
    try:
        for _ in range(12):
            group = buffer.get(version)
            consumed.append((version, group.policy_version))
            version += 1  # the learner updated the weights
            worker.publish(version, version)
    finally:
        worker.stop()
    assert all(current - produced <= max_staleness for current, produced in consumed)
    # The buffer held 4 version-0 groups when the learner started, so a bound below 3 must drop some.
    assert buffer.dropped > 0
    assert loaded and loaded == sorted(loaded)


def test_worker_failure_reaches_the_learner() -> None:
    def broken(index: int, version: int) -> Group:
        raise ValueError("env server unreachable")

    buffer = GroupBuffer(capacity=2, max_staleness=1)
    worker = RolloutWorker(buffer, broken, lambda weights: None)
    worker.start()
    with pytest.raises(RuntimeError, match="rollout worker failed") as info:
        buffer.get(0)
    assert isinstance(info.value.__cause__, ValueError)
    worker.stop()
