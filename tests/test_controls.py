"""Negative controls on every task of the bundled environments whose policy states rules: each control scores 0
wherever it behaves differently from the oracle, and the oracle scores 1.0 everywhere."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envgym.controls import NEGATIVE_CONTROLS, GuessSprayPolicy, negative_control
from envgym.env import MAX_TEXT
from envgym.policies import OraclePolicy
from envgym.runner import run_episode
from envgym.scripted import scripted_turns

RULED = ["retail", "travel", "workspace"]
# Tasks on which skipping a step changes nothing: workspace has no authentication step and its read-only tasks,
# like those of retail and travel, no write to confirm. There the control is the oracle itself.
IDENTICAL_TO_ORACLE = {
    "retail": {"skip-auth": 0, "skip-confirm": 6},
    "travel": {"skip-auth": 0, "skip-confirm": 6},
    "workspace": {"skip-auth": 49, "skip-confirm": 13},
}


@pytest.mark.parametrize("name", RULED)
def test_controls_score_zero_wherever_they_differ_from_the_oracle(name: str) -> None:
    env = gym.make(f"envgym/{name}-v0")
    data = env.unwrapped.data
    identical = {"skip-auth": 0, "skip-confirm": 0}
    passed: list[tuple[str, str, dict[str, float]]] = []
    for task in data.tasks:
        options = {"task_id": task.id}
        oracle = run_episode(env, OraclePolicy(data), options=options)
        assert oracle.reward == 1.0, (task.id, oracle.reward_components)
        for control in NEGATIVE_CONTROLS:
            policy = negative_control(control, data)
            if isinstance(policy, OraclePolicy) and scripted_turns(
                data.world, task, authenticate=policy.authenticate, confirm=policy.confirm
            ) == scripted_turns(data.world, task):
                identical[control] += 1
                continue
            trajectory = run_episode(env, policy, options=options)
            if trajectory.reward != 0.0:
                passed.append((control, task.id, trajectory.reward_components))
    assert passed == []
    assert identical == IDENTICAL_TO_ORACLE[name]


def test_skipping_authentication_fails_on_the_rule_alone() -> None:
    env = gym.make("envgym/retail-v0")
    trajectory = run_episode(env, negative_control("skip-auth"), options={"task_id": "cancel_W0071"})
    components = trajectory.reward_components
    assert components["rule_authenticate"] == 0.0
    assert components["state"] == components["rule_confirm"] == components["rule_no_extra_writes"] == 1.0


def test_skipping_confirmation_fails_on_the_rule_alone() -> None:
    env = gym.make("envgym/travel-v0")
    task = next(t for t in env.unwrapped.data.tasks if t.id.startswith("bags_"))
    components = run_episode(env, negative_control("skip-confirm"), options={"task_id": task.id}).reward_components
    assert components["rule_confirm"] == 0.0
    assert components["state"] == components["rule_authenticate"] == components["rule_no_extra_writes"] == 1.0


def test_the_spray_fits_the_action_space_and_holds_the_answer() -> None:
    env = gym.make("envgym/retail-v0")
    data = env.unwrapped.data
    task = next(t for t in data.tasks if t.answers)
    turns = GuessSprayPolicy(data).turns(data, task)
    assert all(len(t) <= MAX_TEXT for t in turns)
    said = " ".join(turns)
    assert all(a.value in said for a in task.answers)  # it fails by guessing, not by missing the answer
    components = run_episode(env, GuessSprayPolicy(data), options={"task_id": task.id}).reward_components
    assert components["answers"] == 0.0 and components["state"] == 1.0


def test_unknown_control_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown negative control 'lazy'.*guess-spray"):
        negative_control("lazy")
