"""Partial credit that follows the task's reference program (`ProgramReward`, reward 'env+program'): the real retail
env played by the oracle and cut short, and conversations written out by hand for the matching rules."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import EpisodeRun, Trajectory
from envgym.play.policies import OraclePolicy
from envgym.protocol.hermes import format_tool_call
from envgym.rewards.combine import ProgressReward, RewardConfigError, build_reward_source
from envgym.rewards.program import ProgramReward, reference_calls_made
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.policy import tiny_random_policy

TASK = "cancel_W0071"  # find_user_id_by_email -> get_order_details -> cancel_pending_order


def solutions() -> dict[str, Any]:
    env = gym.make("envgym/retail-v0")
    out = {task.id: task.solution for task in env.unwrapped.data.tasks}
    env.close()
    return out


def oracle_then_cut(turns: int) -> Trajectory:
    """The oracle's first `turns` turns of the task, then the trainer's turn cap stops the episode (reward 0)."""
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    oracle = OraclePolicy()
    run = EpisodeRun(env, seed=0, options={"task_id": TASK})
    for _ in range(turns):
        run.step(oracle.act(run.obs, run.info))
    if not run.done:
        run.stop()
    env.close()
    return run.trajectory


def assistant_calls(*calls: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "", "tool_calls": [
        {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": arguments}}]}
        for i, (name, arguments) in enumerate(calls)]


def test_episodes_cut_at_the_turn_cap_keep_the_reference_calls_they_made() -> None:
    cut = [oracle_then_cut(turns) for turns in (0, 1, 2, 3)]
    assert all(t.truncated and t.reward == 0.0 for t in cut)
    source = ProgramReward(solutions(), weight=0.1)
    made = [reference_calls_made(t.messages, source.solutions[TASK]) for t in cut]
    assert made == sorted(made) and made[0] == 0 and made[-1] >= 2  # further along, more credit
    assert source.score(cut) == pytest.approx([0.1 * n for n in made])
    assert ProgressReward(weight=0.1).score(cut) == [0.0] * 4  # 'env+tools' gives every cut episode 0


def as_the_trainer_keeps_it(trajectory: Trajectory) -> Trajectory:
    """The trainer's token view of the conversation: each assistant turn is the text the model wrote (its tool calls
    in the chat template's format), not the env's parsed OpenAI `tool_calls`."""
    messages = []
    for m in trajectory.messages:
        if m["role"] == "assistant" and m.get("tool_calls"):
            text = "".join(format_tool_call(c["function"]["name"], json.loads(c["function"]["arguments"]))
                           for c in m["tool_calls"])
            m = {"role": "assistant", "content": (m.get("content") or "") + text}
        messages.append(m)
    return Trajectory(trajectory.env_name, trajectory.task_id, messages, trajectory.tools, reward=trajectory.reward)


def test_the_calls_count_in_the_trainers_text_view_of_the_conversation() -> None:
    """Found in a training run: the trainer scores the conversation as the model wrote it, where a call is text, and
    every episode got no credit (all groups of a failing task had zero variance)."""
    cut = oracle_then_cut(3)
    source = ProgramReward(solutions(), weight=0.1)
    text_view = as_the_trainer_keeps_it(cut)
    assert not any(m.get("tool_calls") for m in text_view.messages)
    made = reference_calls_made(cut.messages, source.solutions[TASK])
    assert made >= 2
    assert reference_calls_made(text_view.messages, source.solutions[TASK]) == made
    assert source.score([text_view]) == pytest.approx([0.1 * made])


def test_a_finished_episode_scores_its_success_plus_every_reference_call() -> None:
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    oracle = OraclePolicy()
    run = EpisodeRun(env, seed=0, options={"task_id": TASK})
    while not run.done:
        run.step(oracle.act(run.obs, run.info))
    env.close()
    done = run.trajectory
    source = ProgramReward(solutions(), weight=0.1)
    assert done.success
    assert source.score([done]) == pytest.approx([1.0 + 0.1 * len(source.solutions[TASK])])


def test_only_the_reference_calls_in_order_count() -> None:
    solution = [{"name": "find", "arguments": {"phone": "555", "postcode": "61997"}},
                {"name": "list", "arguments": {"grower_id": "GR1"}},
                {"name": "get_zone", "arguments": {"zone_id": "ZO15"}}]
    right = assistant_calls(("find", json.dumps({"postcode": 61997, "phone": "555"})),  # int or text: same value
                            ("list", {"grower_id": "GR1"}), ("get_zone", '{"zone_id": "ZO15"}'))
    assert reference_calls_made(right, solution) == 3
    wrong_record = [*right[:2], *assistant_calls(("get_zone", {"zone_id": "ZO16"}))]
    assert reference_calls_made(wrong_record, solution) == 2  # the zone of another plan earns nothing
    out_of_order = assistant_calls(("list", {"grower_id": "GR1"}), ("find", {"phone": "555", "postcode": "61997"}))
    assert reference_calls_made(out_of_order, solution) == 1
    detours = [*assistant_calls(("list", {"grower_id": "GR9"}), ("find", "{not json")), *right]
    assert reference_calls_made(detours, solution) == 3  # other and malformed calls in between cost nothing
    tool_and_user_turns = [{"role": "tool", "content": "GR1"}, {"role": "user", "content": "find my plan"}]
    assert reference_calls_made(tool_and_user_turns, solution) == 0


def test_bad_configuration_is_refused_with_a_message_naming_it() -> None:
    with pytest.raises(RewardConfigError, match="needs the tasks' reference solutions"):
        build_reward_source("env+program")
    with pytest.raises(RewardConfigError, match=r"weight must be a finite number >= 0, got -0\.5"):
        ProgramReward({}, weight=-0.5)
    stranger = Trajectory("retail", "no_such_task", [], [])
    with pytest.raises(RewardConfigError, match="no reference solution for task 'no_such_task'"):
        ProgramReward(solutions()).score([stranger])


def test_the_trainer_builds_it_from_its_environment(tmp_path: Path) -> None:
    config = GRPOConfig(env_id="envgym/retail-v0", model="tiny-random", output_dir=str(tmp_path), group_size=2,
                        heldout_tasks=2, reward="env+program", tool_call_weight=0.2)
    trainer = GRPOTrainer(config, policy=tiny_random_policy(seed=0))
    source = trainer.reward_source
    assert isinstance(source, ProgramReward) and source.weight == 0.2
    assert source.solutions == solutions()
