"""Partial credit for training (`ProgressReward`, reward 'env+tools'): a real env's labels of needed tool calls
rank the failed episodes of a group, while success stays the verifiable reward's."""

from __future__ import annotations

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.play.episode import EpisodeRun, Trajectory
from envgym.play.policies import OraclePolicy
from envgym.rewards.combine import EnvReward, ProgressReward, RewardConfigError, build_reward_source
from envgym.train.config import GRPOConfig
from envgym.users import STOP


def play(calls: int, task: str = "cancel_W0071") -> Trajectory:
    """The oracle's first `calls` turns of a retail task, then the agent gives up (reward 0 unless it finished)."""
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    oracle = OraclePolicy()
    run = EpisodeRun(env, seed=0, options={"task_id": task})
    for _ in range(calls):
        if run.done:
            break
        run.step(oracle.act(run.obs, run.info))
    while not run.done:
        run.step(f"I cannot finish this. {STOP}")
    env.close()
    return run.trajectory


def test_failed_episodes_are_ranked_by_the_tool_calls_they_made_use_of() -> None:
    nothing, partway, done = play(0), play(3), play(4)  # the oracle's fourth turn completes the cancellation
    assert [nothing.reward, partway.reward] == [0.0, 0.0]  # the verifiable reward sees no difference
    assert nothing.tool_calls_needed == 0 < partway.tool_calls_needed < done.tool_calls_needed
    group = [nothing, partway, done]
    assert EnvReward().score(group) == [0.0, 0.0, 1.0]
    scores = ProgressReward(weight=0.1).score(group)
    assert scores == pytest.approx([t.reward + 0.1 * t.tool_calls_credited for t in group])
    assert scores[0] < scores[1] < 1.0 < scores[2]  # partial credit never reaches a success


def test_a_finished_episode_keeps_its_verifiable_success() -> None:
    oracle = OraclePolicy()
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    run = EpisodeRun(env, seed=0, options={"task_id": "cancel_W0071"})
    while not run.done:
        run.step(oracle.act(run.obs, run.info))
    env.close()
    done = run.trajectory
    assert done.success and done.tool_calls_needed >= 1
    (score,) = ProgressReward(weight=0.1).score([done])
    assert score == pytest.approx(1.0 + 0.1 * done.tool_calls_credited)
    assert done.success  # the shaped score is for the gradient only; success is still reward >= 1


def test_an_episode_cut_short_before_grading_gets_no_credit() -> None:
    env = gym.make("envgym/retail-v0", failure_rate=0.0)
    run = EpisodeRun(env, seed=0, options={"task_id": "cancel_W0071"})
    oracle = OraclePolicy()
    run.step(oracle.act(run.obs, run.info))
    run.step(oracle.act(run.obs, run.info))
    run.stop()  # the trainer's turn or token cap: the env never graded it
    env.close()
    assert run.trajectory.tool_calls_needed == 0
    assert ProgressReward().score([run.trajectory]) == [0.0]


def test_the_source_is_built_by_name_and_checks_its_weight() -> None:
    source = build_reward_source("env+tools", tool_call_weight=0.25)
    assert isinstance(source, ProgressReward) and source.weight == 0.25 and source.name == "env+tools"
    with pytest.raises(RewardConfigError, match="weight must be a finite number >= 0, got -1"):
        ProgressReward(weight=-1.0)
    with pytest.raises(ValueError, match="tool_call_weight"):
        GRPOConfig(reward="env+tools", tool_call_weight=-0.1)
