"""Bounded shaping credit (issue 37, part 1): the training rewards 'env+tools' and 'env+program' and the env's
per-call rewards cannot be farmed by repeating calls, and a failed episode never out-earns a successful one."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import EpisodeRun, Trajectory
from envgym.play.policies import OraclePolicy
from envgym.play.scripted import confirmation_request
from envgym.protocol import format_tool_call
from envgym.rewards.combine import ProgressReward
from envgym.rewards.credit import CREDIT_CAP, bounded_reward
from envgym.rewards.program import ProgramReward
from envgym.users import STOP

TASK = "cancel_R0022"  # travel: authenticate, read the reservation, cancel it (confirmed)


def _travel(**kwargs: object) -> gym.Env:
    return gym.make("envgym/travel-v0", failure_rate=0.0, **kwargs)


def _solutions(env: gym.Env) -> dict[str, list]:
    return {t.id: t.solution for t in env.unwrapped.data.tasks}


def _play(env: gym.Env, actions: list[str], task: str = TASK) -> Trajectory:
    run = EpisodeRun(env, seed=0, options={"task_id": task})
    for action in actions:
        if run.done:
            break
        run.step(action)
    while not run.done:
        run.step(f"Goodbye. {STOP}")
    return run.trajectory


def _oracle(env: gym.Env, task: str = TASK) -> Trajectory:
    oracle = OraclePolicy(env.unwrapped.data)
    run = EpisodeRun(env, seed=0, options={"task_id": task})
    while not run.done:
        run.step(oracle.act(run.obs, run.info))
    return run.trajectory


def _echo_flood(env: gym.Env, name: str, arguments: dict, copies: int = 500) -> Trajectory:
    """One turn with `copies` identical calls, then a reply that echoes the result (the issue's farm)."""
    run = EpisodeRun(env, seed=0, options={"task_id": TASK})
    run.step("\n".join([format_tool_call(name, arguments)] * copies))
    run.step(f"Here is what I found: {run.info['messages'][-1]['content']} {STOP}")
    return run.trajectory


def test_five_hundred_copies_of_a_public_read_earn_less_than_the_oracle() -> None:
    env = _travel()
    farmed = _echo_flood(env, "get_flight_details", {"flight_number": "HAT001"})
    oracle = _oracle(env)
    assert farmed.reward == 0.0 and oracle.reward == 1.0
    (farm,) = ProgressReward(0.1).score([farmed])  # the issue measured 50.0 here, against 1.18 for the oracle
    (best,) = ProgressReward(0.1).score([oracle])
    assert farm < 0.5 * best and farm < 1.0


def test_copies_of_a_reference_call_earn_once() -> None:
    env = _travel()
    farmed = _echo_flood(env, "get_reservation_details", {"reservation_id": "R0022"})
    assert farmed.tool_calls_credited <= 1
    (score,) = ProgressReward(0.1).score([farmed])
    assert score <= 0.1 + 1e-9


def test_a_huge_weight_cannot_lift_a_failure_to_a_success() -> None:
    env = _travel()
    farmed = _echo_flood(env, "get_reservation_details", {"reservation_id": "R0022"}, copies=20)
    oracle = _oracle(env)
    for weight in (0.1, 1.0, 1e6):
        failed, succeeded = ProgressReward(weight).score([farmed, oracle])
        assert failed < 1.0 <= succeeded
        failed, succeeded = ProgramReward(_solutions(env), weight).score([farmed, oracle])
        assert failed < 1.0 <= succeeded


def test_a_write_that_broke_the_confirmation_rule_earns_nothing() -> None:
    env = _travel()
    solution = _solutions(env)[TASK]
    skipped = _play(env, [format_tool_call(c.name, c.arguments) for c in solution] + ["Done."])
    assert skipped.reward_components["rule_confirm"] == 0.0
    assert skipped.broke_rule_calls == [2]  # the unconfirmed cancellation
    program = ProgramReward(_solutions(env), 0.1)
    assert program.score([skipped]) == pytest.approx([0.2])  # the two reads, not the write
    assert ProgressReward(0.1).score([skipped]) == pytest.approx([0.1 * skipped.tool_calls_credited])
    assert skipped.tool_calls_credited <= 2


def test_bounded_reward_keeps_successes_and_caps_failures() -> None:
    assert bounded_reward(1.0, 0.3) == 1.3
    assert bounded_reward(1.0, -5.0) == 1.0
    assert bounded_reward(0.0, 0.3) == 0.3
    assert bounded_reward(0.0, 50.0) == CREDIT_CAP
    assert bounded_reward(0.9, 50.0) < 1.0


# ---------------------------------------------------------------- the property over random call sequences

_ENV = _travel(max_steps=12)
_PER_CALL = _travel(max_steps=12)
_DATA = _ENV.unwrapped.data
_TASK = _DATA.task(TASK)
_READS = [("get_flight_details", {"flight_number": f"HAT{n:03d}"}) for n in range(6)] + [
    ("get_reservation_details", {"reservation_id": f"R{n:04d}"}) for n in (1, 7, 22)]
_POOL = [(c.name, c.arguments) for c in _TASK.solution] + _READS + [
    ("cancel_reservation", {"reservation_id": "R0007"}), ("get_user_details", {"user_id": "nobody"})]


@st.composite
def _turns(draw: st.DrawFn) -> list[str]:
    """Random agent turns: batches of calls from a pool (the reference's among them, copies in one turn), replies
    that echo everything seen, confirmation requests with or without values, and the oracle's own turns."""
    turns = []
    for _ in range(draw(st.integers(1, 10))):
        kind = draw(st.sampled_from(["calls", "calls", "echo", "ask", "ask_values"]))
        if kind == "calls":
            picks = draw(st.lists(st.sampled_from(_POOL), min_size=1, max_size=4))
            copies = draw(st.integers(1, 30))
            turns.append("\n".join(format_tool_call(n, a) for n, a in picks for _ in range(copies)))
        elif kind == "echo":
            turns.append("Here is everything: HAT001 R0022 R0007 223.0 SEA BOS 17:50 scheduled")
        else:
            name, arguments = _TASK.solution[-1].name, _TASK.solution[-1].arguments
            turns.append(confirmation_request(name, arguments if kind == "ask_values" else None))
    return turns


@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(turns=_turns(), weight=st.floats(0.0, 1e6), env_weight=st.floats(0.0, 1e6))
def test_no_random_call_sequence_earns_a_success(turns: list[str], weight: float, env_weight: float) -> None:
    trajectory = _play(_ENV, turns)
    reference = len(_TASK.solution)
    assert trajectory.tool_calls_credited <= reference
    shaped = [*ProgressReward(weight).score([trajectory]), *ProgramReward(_solutions(_ENV), weight).score([trajectory])]
    _PER_CALL.unwrapped.tool_reward_weight = env_weight
    per_call = _play(_PER_CALL, turns)  # the env's own reward, with per-call shaping at `env_weight`
    verdict = trajectory.reward
    if verdict >= 1.0:
        assert min(*shaped, per_call.reward) >= 1.0
    else:
        assert max(*shaped, per_call.reward) < 1.0
        assert max(*shaped) <= verdict + CREDIT_CAP * (1.0 - verdict) + 1e-9
