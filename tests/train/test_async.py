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
        make_batch=lambda index, version: Group(f"task-{index}", [], version),
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


@pytest.mark.parametrize("lead", [0, 1, 2])
def test_a_gated_worker_never_makes_a_batch_older_than_its_lead(lead: int) -> None:
    # The learner takes a step's two groups, updates (version + 1), publishes and finishes the step. The worker
    # may start batch i only after i - lead finished steps, so whatever the threads' timing, every batch the
    # learner takes was sampled at most `lead` versions ago, and none is made only to be dropped.
    started: list[tuple[int, int]] = []
    buffer = GroupBuffer(capacity=8, max_staleness=lead)
    worker = RolloutWorker(
        buffer,
        make_batch=lambda index, version: (
            started.append((index, version)), [Group(f"step-{index}", [], version) for _ in range(2)])[1],
        load_weights=lambda weights: None,
        lead=lead,
    )
    worker.start()
    version = 0
    taken: list[tuple[int, list[str], list[int]]] = []
    try:
        for _ in range(10):
            groups = [buffer.get(version) for _ in range(2)]
            taken.append((version, [g.task_id for g in groups], [g.policy_version for g in groups]))
            version += 1
            worker.publish(version, version)
            worker.finish_step()
    finally:
        worker.stop()
    assert buffer.dropped == 0
    assert [tasks for _, tasks, _ in taken] == [[f"step-{i}"] * 2 for i in range(10)]  # one batch per step
    assert all(0 <= current - made <= lead for current, _, versions in taken for made in versions)
    # Batch i starts with the weights of at least i - lead finished steps (one update each here).
    assert all(version >= index - lead for index, version in started)


def test_a_worker_lead_below_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="lead must be >= 0"):
        RolloutWorker(GroupBuffer(1, 0), lambda index, version: [], lambda weights: None, lead=-1)
