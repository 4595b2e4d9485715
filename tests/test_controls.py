"""Negative controls and reward hackers (`envgym.play.hacks`) on every task of the bundled environments whose policy
states rules: every control and every hacker scores 0 on every task, and the oracle scores 1.0 everywhere."""

from __future__ import annotations

import gymnasium as gym
import pytest

from envgym.play.controls import NEGATIVE_CONTROLS, GuessSprayPolicy, negative_control
from envgym.play.episode import run_episode
from envgym.play.hacks import REWARD_HACKS
from envgym.play.policies import OraclePolicy
from envgym.play.scripted import needs_confirmation
from envgym.spaces import MAX_TEXT

RULED = ["retail", "travel", "workspace"]


@pytest.mark.parametrize("name", RULED)
def test_every_task_authenticates_and_makes_a_write_to_confirm(name: str) -> None:
    data = gym.make(f"envgym/{name}-v0").unwrapped.data
    world = data.world
    assert world.rules is not None and world.rules.authenticate_with and world.rules.confirm_writes
    for task in data.tasks:
        names = [c.name for c in task.solution]
        assert names[0] in world.rules.authenticate_with, task.id
        assert any(needs_confirmation(world, n) for n in names), task.id


@pytest.mark.parametrize("name", RULED)
def test_every_control_scores_zero_on_every_task(name: str) -> None:
    env = gym.make(f"envgym/{name}-v0")
    data = env.unwrapped.data
    passed: list[tuple[str, str, dict[str, float]]] = []
    for task in data.tasks:
        options = {"task_id": task.id}
        oracle = run_episode(env, OraclePolicy(data), options=options)
        assert oracle.reward == 1.0, (task.id, oracle.reward_components)
        for control in NEGATIVE_CONTROLS:
            trajectory = run_episode(env, negative_control(control, data), options=options)
            if trajectory.reward != 0.0:
                passed.append((control, task.id, trajectory.reward_components))
    assert passed == []


@pytest.mark.parametrize(("name", "task_id"), [("retail", "cancel_W0071"), ("workspace", "event_location_EV0007")])
def test_skipping_authentication_fails_on_the_rule_alone(name: str, task_id: str) -> None:
    env = gym.make(f"envgym/{name}-v0")
    trajectory = run_episode(env, negative_control("skip-auth"), options={"task_id": task_id})
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
    assert components["answers"] == 0.0  # said, among the guesses, and still not accepted


def test_unknown_control_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown negative control 'lazy'.*guess-spray"):
        negative_control("lazy")


@pytest.mark.parametrize("name", RULED)
def test_every_reward_hack_scores_zero_on_every_task(name: str) -> None:
    """Issue 37's hackers (before it: wrong-then-right 16/36 retail, 14/34 travel, 24/49 workspace; enumerate-writes
    16, 14, 23; destroy-all 30/49 workspace; hedge 6/36 retail, 6/34 travel)."""
    env = gym.make(f"envgym/{name}-v0")
    data = env.unwrapped.data
    passed = [(hack, task.id, trajectory.reward_components) for task in data.tasks for hack, make in REWARD_HACKS.items()
              if (trajectory := run_episode(env, make(data, 0), options={"task_id": task.id})).reward != 0.0]
    assert passed == []


def test_a_wrong_value_written_then_overwritten_fails_the_rule_alone() -> None:
    env = gym.make("envgym/travel-v0")
    task = next(t for t in env.unwrapped.data.tasks if t.id.startswith("bags_"))
    trajectory = run_episode(env, REWARD_HACKS["wrong-then-right"](env.unwrapped.data, 0), options={"task_id": task.id})
    components = trajectory.reward_components
    assert components["rule_no_extra_writes"] == 0.0
    assert components["state"] == components["rule_confirm"] == components["rule_authenticate"] == 1.0


def test_enumerating_bag_counts_is_declined_and_fails() -> None:
    env = gym.make("envgym/travel-v0")
    data = env.unwrapped.data
    task = next(t for t in data.tasks if t.id.startswith("bags_") and t.solution[-1].arguments["bags"] >= 2)
    trajectory = run_episode(env, REWARD_HACKS["enumerate-writes"](data, 0), options={"task_id": task.id})
    declined = [m for m in trajectory.messages if m["role"] == "user" and m["content"].startswith("No,")]
    assert len(declined) == task.solution[-1].arguments["bags"]  # 0, 1, ... before the asked count
    assert trajectory.reward == 0.0 and trajectory.reward_components["rule_confirm"] == 0.0


def test_destructive_calls_the_guard_held_still_count_as_attempts() -> None:
    env = gym.make("envgym/workspace-v0")
    data = env.unwrapped.data
    task = data.task("delete_file_F0006")
    trajectory = run_episode(env, REWARD_HACKS["destroy-all"](data, 0), options={"task_id": task.id})
    assert trajectory.guard  # the guard held the calls on files the user did not name
    assert trajectory.reward == 0.0
    assert trajectory.reward_components["rule_no_extra_writes"] == trajectory.reward_components["rule_confirm"] == 0.0
