"""Tool failure modes the env plays (`ToolSpec.faults`): rate limits and transient failures, deterministic by the
episode's seed, never in replays; a retry of the failed call goes through, and the oracle retries."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import build_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.world.replay import replay_solution
from envgym.world.spec import TaskSpec, ToolCall, ToolFaults, WorldSpec
from envgym.world.state import generate_state
from envgym.world.tools import FaultLedger, ToolExecutor


def faulty(world: WorldSpec, **faults: Any) -> WorldSpec:
    tools = [t.model_copy(update={"faults": ToolFaults(**faults)}) for t in world.tools]
    return world.model_copy(update={"tools": tools})


def outcomes(world: WorldSpec, seed: int, calls: int = 30) -> list[str]:
    executor, state = ToolExecutor(world), generate_state(world)
    ledger, rng = FaultLedger(), random.Random(seed)
    results = [executor.execute(state, "get_item", {"item_id": "I0001"}, rng, 0.0, ledger) for _ in range(calls)]
    return [str(r.error_kind) if not r.ok else "ok" for r in results]


def test_a_rate_limit_refuses_the_call_after_n_and_lets_the_retry_through(shop_world: WorldSpec) -> None:
    seen = outcomes(faulty(shop_world, rate_limit=2), seed=0, calls=9)
    assert seen == ["ok", "ok", "rate_limited"] * 3


def test_transient_failures_follow_the_seed_and_never_fail_a_retry(shop_world: WorldSpec) -> None:
    world = faulty(shop_world, transient=0.5)
    first = outcomes(world, seed=1)
    assert first == outcomes(world, seed=1) != outcomes(world, seed=2)
    assert 3 <= first.count("transient") <= 20
    assert all(not (a == b == "transient") for a, b in itertools.pairwise(first))


def test_faults_change_nothing_and_replays_never_meet_them(shop_world: WorldSpec) -> None:
    world = faulty(shop_world, transient=1.0, rate_limit=1)
    executor, state = ToolExecutor(world), generate_state(world)
    before = state.hash()
    failed = executor.execute(state, "close_item", {"item_id": "I0001"}, random.Random(0), 0.0, FaultLedger())
    assert failed.error_kind == "transient" and "retry" in (failed.error or "") and state.hash() == before
    task = TaskSpec(id="t", instruction="i", opening="o", solution=[ToolCall(name="add_item", arguments={"name": "x"})])
    assert replay_solution(executor, state, task).hash() != before  # no ledger, no fault


@pytest.mark.parametrize("faults", [{"transient": 0.5}, {"rate_limit": 1}, {"transient": 0.3, "rate_limit": 1}])
def test_the_oracle_retries_failed_calls_and_scores_one(shop_world: WorldSpec, faults: dict[str, Any]) -> None:
    calls = [ToolCall(name="get_item", arguments={"item_id": "I0001"}),
             ToolCall(name="set_qty", arguments={"item_id": "I0001", "qty": 17}),
             ToolCall(name="set_qty", arguments={"item_id": "I0002", "qty": 18}),
             ToolCall(name="get_item", arguments={"item_id": "I0002"})]
    data = build_environment(faulty(shop_world, **faults), [TaskSpec(id="t", instruction="i", opening="o",
                                                                    solution=calls)])
    env = ToolWorldEnv(data=data)
    errors = []
    for seed in range(4):
        trajectory = run_episode(env, OraclePolicy(data), seed=seed)
        assert trajectory.reward == 1.0, trajectory.reward_components
        errors += trajectory.tool_errors
    assert {"transient", "rate_limited"} & set(errors) and set(errors) <= {"transient", "rate_limited"}
