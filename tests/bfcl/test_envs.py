"""The BFCL environments as Gymnasium environments: made by id, checked, pickled, vectorised, served, listed, and
every multi-turn category played end to end through `gym.make`."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envgym  # noqa: F401 (registers the environments)
from envgym.integrations.bfcl import data
from envgym.integrations.bfcl.oracle import multi_turn_actions, multi_turn_calls, single_turn_action
from envgym.protocol import format_tool_call
from envgym.remote import RemoteEnv
from tests.sandbox.serving import Served, start_serve

MULTI = "envgym/bfcl-multi-turn-v0"
SINGLE = "envgym/bfcl-v0"


def play(env: gym.Env, actions: list[str]) -> tuple[float, dict]:
    reward, info, done = 0.0, {}, False
    for action in actions:
        assert not done, "the episode ended before the actions did"
        _, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
    assert done, "the episode did not end with the actions"
    return float(reward), info


@pytest.mark.parametrize("category", data.MULTI_TURN_CATEGORIES)
def test_every_multi_turn_category_plays_end_to_end(category: str) -> None:
    task = data.task_ids(category)[7]
    env = gym.make(MULTI, category=category)
    _, info = env.reset(options={"task_id": task})
    assert info["task_id"] == task and info["messages"][1]["role"] == "user"
    reward, info = play(env, multi_turn_actions(multi_turn_calls(task)))
    assert reward == 1.0 and info["bfcl"]["valid"] and info["reward_components"] == {"bfcl": 1.0}
    # The same entry answered with words only fails, with BFCL's reason.
    env.reset(options={"task_id": task})
    turns = len(data.entry(task)["question"])
    reward, info = play(env, ["I will not call any function."] * turns)
    assert reward == 0.0 and info["bfcl"]["error_type"] == "multi_turn:empty_turn_model_response"


def test_miss_func_adds_the_held_out_function_on_its_turn() -> None:
    task = "multi_turn_miss_func_0"
    held = [d["name"] for docs in data.entry(task)["missed_function"].values() for d in docs]
    env = gym.make(MULTI, task=task)
    _, info = env.reset()
    assert held and not set(held) & {t["function"]["name"] for t in info["tools"]}
    actions = multi_turn_actions(multi_turn_calls(task))
    seen = []
    for action in actions:
        obs, _, _, _, info = env.step(action)
        seen.append({t["function"]["name"] for t in info["tools"]})
        if "I have updated some more functions" in obs:
            assert set(held) <= seen[-1]
            break
    assert not set(held) <= seen[0]


def test_a_turn_past_bfcls_step_limit_is_forced_to_quit() -> None:
    env = gym.make(MULTI, task="multi_turn_base_0")
    env.reset()
    reward, terminated = 0.0, False
    for _ in range(21):
        _, reward, terminated, _, info = env.step(format_tool_call("pwd", {}))
    assert terminated and reward == 0.0
    assert info["bfcl"]["error_type"] == "multi_turn:force_terminated"


def test_names_that_are_no_backend_method_are_never_evaluated(tmp_path: Path) -> None:
    target = tmp_path / "written_by_the_agent"
    env = gym.make(MULTI, task="multi_turn_base_0")
    env.reset()
    obs, *_ = env.step(format_tool_call("open", {"file": str(target), "mode": "w"}))
    assert "name 'open' is not defined" in obs and not target.exists()
    obs, *_ = env.step(format_tool_call("cd", {"folder=1),open(x": "y"}))
    assert "invalid syntax" in obs


def test_a_malformed_call_ends_the_turn_as_an_undecodable_response_does() -> None:
    env = gym.make(MULTI, task="multi_turn_base_0")
    env.reset()
    obs, _, terminated, _, info = env.step('<tool_call>{"name": "ls", "arguments": </tool_call>')
    assert not terminated and info["turn"] == 1 and "Not run" in obs and "user:" in obs


@pytest.mark.parametrize("env_id", [MULTI, SINGLE])
def test_check_env_passes(env_id: str) -> None:
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)


def test_a_pickled_episode_goes_on_the_same() -> None:
    task = "multi_turn_long_context_3"
    actions = multi_turn_actions(multi_turn_calls(task))
    env = gym.make(MULTI, task=task).unwrapped
    env.reset()
    for action in actions[:3]:
        env.step(action)
    copy = pickle.loads(pickle.dumps(env))
    rest = actions[3:]
    first, second = play(env, rest), play(copy, rest)
    assert first[0] == second[0] == 1.0
    assert first[1]["messages"] == second[1]["messages"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_run_bfcl(mode: str) -> None:
    envs = gym.make_vec(SINGLE, num_envs=2, vectorization_mode=mode, vector_kwargs={"copy": True},
                        category="simple")
    tasks = ["simple_python_0", "simple_python_1"]
    obs, _ = envs.reset(seed=0, options={"task_id": tasks[0]})
    assert len(obs) == 2
    _, rewards, terminated, _, _ = envs.step([single_turn_action(tasks[0]), "no call"])
    assert list(rewards) == [1.0, 0.0] and all(terminated)
    envs.close()


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = start_serve(env="bfcl-multi-turn")
    yield server
    assert server.stop() == 0


def test_envgym_serve_hosts_a_multi_turn_episode(served: Served) -> None:
    task = "multi_turn_miss_param_2"
    env = RemoteEnv(served.url, token_file=served.token_file, task=task)
    _, info = env.reset()
    assert info["task_id"] == task
    reward, info = play(env, multi_turn_actions(multi_turn_calls(task)))
    assert reward == 1.0 and info["bfcl"]["valid"]
    env.close()


def test_single_turn_env_grades_with_the_ast_checker() -> None:
    env = gym.make(SINGLE, task="parallel_3")
    env.reset()
    reward, info = play(env, [single_turn_action("parallel_3")])
    assert reward == 1.0
    env.reset()
    reward, info = play(env, ["I cannot."])
    assert reward == 0.0 and info["bfcl"]["error_type"] == "ast_decoder:decoder_failed"
    env.reset(options={"task_id": "irrelevance_0"})
    reward, _ = play(env, ["None of these functions fits."])
    assert reward == 1.0


def test_unknown_categories_and_tasks_are_named() -> None:
    with pytest.raises(Exception, match="unknown BFCL category 'nope'"):
        gym.make(MULTI, category="nope")
    with pytest.raises(Exception, match="unknown BFCL task 'multi_turn_base_9999'"):
        gym.make(MULTI, task="multi_turn_base_9999")
    with pytest.raises(Exception, match="not a task of bfcl-multi-turn"):
        gym.make(MULTI, task="simple_python_0")


def test_episodes_leave_no_backends_in_bfcls_executor() -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    env = gym.make(MULTI, task="multi_turn_base_5")
    for _ in range(2):
        env.reset()
        play(env, multi_turn_actions(multi_turn_calls("multi_turn_base_5")))
    assert not [k for k in vars(multi_turn_utils) if k.startswith("envgym_")]
