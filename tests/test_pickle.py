"""Every registered env pickles and deep-copies mid-episode, and runs in AsyncVectorEnv workers started by spawn."""

from __future__ import annotations

import copy
import functools
import pickle
import subprocess
import sys

import gymnasium as gym
import pytest

import envgym
from envgym.protocol import format_tool_call

FOLDER_ENVS = [i for i in envgym.registered_ids() if "env_dir" in (gym.registry[i].kwargs or {})]


def _mid_episode(env_id: str) -> gym.Env:
    env = gym.make(env_id)
    env.reset(seed=0)
    task = env.unwrapped.task
    call = task.solution[0] if task.solution else None
    env.step(format_tool_call(call.name, call.arguments) if call else "Let me look into it.")
    return env


def _same_continuation(a: gym.Env, b: gym.Env) -> None:
    """The copy goes on like the original; an episode holding resources (code-v0's sandbox, which is not copied)
    only has to go on."""
    held = bool(a.unwrapped.state.resources)
    assert not b.unwrapped.state.resources
    action = "Thanks, what else can you tell me?"
    obs_a, reward_a, *_ = a.step(action)
    obs_b, reward_b, *_ = b.step(action)
    if held:
        assert isinstance(obs_b, str)
    else:
        assert (obs_a, reward_a) == (obs_b, reward_b)
        assert a.unwrapped.messages == b.unwrapped.messages


def test_every_folder_env_is_tested() -> None:
    assert {"envgym/retail-v0", "envgym/code-v0", "envgym/workspace-v0"} <= set(FOLDER_ENVS)


@pytest.mark.parametrize("env_id", FOLDER_ENVS)
def test_env_pickles_mid_episode_and_the_copy_goes_on_alike(env_id: str) -> None:
    env = _mid_episode(env_id)
    clone = pickle.loads(pickle.dumps(env))
    assert clone.unwrapped.state.tables == env.unwrapped.state.tables
    _same_continuation(env, clone)
    env.close()
    clone.close()


@pytest.mark.parametrize("env_id", FOLDER_ENVS)
def test_env_deep_copies_mid_episode_and_the_copy_goes_on_alike(env_id: str) -> None:
    env = _mid_episode(env_id)
    clone = copy.deepcopy(env)
    assert clone.unwrapped.state is not env.unwrapped.state
    _same_continuation(env, clone)
    env.close()
    clone.close()


def test_a_pickled_env_runs_in_a_fresh_process() -> None:
    # Folder tools, hooks and attack suites live in modules imported by path, which a new process lacks.
    blobs = pickle.dumps([_mid_episode(i) for i in FOLDER_ENVS])
    script = ("import pickle, sys\n"
              "for env in pickle.loads(sys.stdin.buffer.read()):\n"
              "    obs, *_ = env.step('Anything else?')\n"
              "    assert isinstance(obs, str)\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], input=blobs, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout.decode().strip() == "ok"


def test_async_vector_env_with_spawned_workers() -> None:
    make = functools.partial(gym.make, "envgym:envgym/retail-v0")
    vec = gym.vector.AsyncVectorEnv([make, make], context="spawn")
    try:
        obs, _ = vec.reset(seed=0)
        assert len(obs) == 2 and all(o.startswith("system:") for o in obs)
        obs, *_ = vec.step(["Hello", format_tool_call("get_order_details", {"order_id": "#W0001"})])
        assert len(obs) == 2 and "#W0001" in obs[1]
    finally:
        vec.close()
