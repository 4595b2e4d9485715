"""ToolWorldEnv's Gymnasium contract: reset/step, termination, truncation, rewards, vector envs, check_env."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envgym
from envgym.env import ToolWorldEnv
from envgym.loader import build_environment
from envgym.world.spec import TaskSpec, ToolCall, WorldSpec

ALL_ENVS = ["envgym/retail-v0", "envgym/travel-v0", "envgym/calculator-v0"]


def call(name: str, **args: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


@pytest.fixture
def shop_env(shop_world: WorldSpec) -> ToolWorldEnv:
    tasks = [TaskSpec(id="close", instruction="Close item I0001.", opening="Please close item I0001.",
                      user_known={"item_id": "I0001"},
                      solution=[ToolCall(name="set_qty", arguments={"item_id": "I0001", "qty": 0})],
                      required_outputs=["done"])]
    return ToolWorldEnv(data=build_environment(shop_world, tasks), max_steps=5)


def test_reset_returns_text_and_openai_info() -> None:
    env = gym.make("envgym/retail-v0")
    obs, info = env.reset(seed=0)
    assert isinstance(obs, str) and info["messages"][-1]["content"] in obs
    assert [m["role"] for m in info["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in info["tools"]} >= {"find_user_id_by_email", "cancel_pending_order"}
    assert info["task_id"] in {t.id for t in env.unwrapped.data.tasks}
    json.dumps(info)  # infos are JSON-serialisable


def test_same_seed_same_task() -> None:
    env = gym.make("envgym/travel-v0")
    assert env.reset(seed=5)[1]["task_id"] == env.reset(seed=5)[1]["task_id"]
    assert len({env.reset(seed=s)[1]["task_id"] for s in range(20)}) > 5


def test_make_kwargs_fix_task_and_steps() -> None:
    env = gym.make("envgym/retail-v0", task="status_W0050", max_steps=2)
    _, info = env.reset(seed=1)
    assert info["task_id"] == "status_W0050"
    env.step("Hello?")
    _, reward, terminated, truncated, _ = env.step("Still there?")
    assert truncated and not terminated and reward == 0.0


def test_unknown_task_fails_at_construction() -> None:
    with pytest.raises(KeyError, match="no task 'nope'"):
        gym.make("envgym/retail-v0", task="nope")


def test_tool_call_gets_its_result(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    obs, reward, terminated, truncated, info = shop_env.step(call("get_item", item_id="I0001"))
    assert '"item_id": "I0001"' in obs and reward == 0.0 and not (terminated or truncated)
    assert info["messages"][-1]["role"] == "tool"
    assert info["messages"][-1]["tool_call_id"] == info["messages"][-2]["tool_calls"][0]["id"]


def test_openai_message_with_parallel_calls_runs_in_order(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    action = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "set_qty", "arguments": '{"item_id": "I0001", "qty": 42}'}},
        {"id": "b", "type": "function", "function": {"name": "get_item", "arguments": '{"item_id": "I0001"}'}},
    ]}
    _, _, _, _, info = shop_env.step(action)
    tool_msgs = info["messages"][-2:]
    assert [m["tool_call_id"] for m in tool_msgs] == ["a", "b"]
    assert json.loads(tool_msgs[1]["content"])["qty"] == 42


@pytest.mark.parametrize("garbage", ["<tool_call>{", '<tool_call>{"name": 5}</tool_call>',
                                     '<tool_call>{"name": "fly"}</tool_call>', "<tool_call>[1, 2]</tool_call>"])
def test_malformed_calls_are_observations(shop_env: ToolWorldEnv, garbage: str) -> None:
    shop_env.reset(seed=0)
    obs, _, terminated, _, info = shop_env.step(garbage)
    assert '"error"' in obs and not terminated
    assert info["tool_errors"]


def test_reply_goes_to_the_user_who_answers_from_the_task(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    obs, *_ = shop_env.step("Which item id is it?")
    assert "I0001" in obs and obs.startswith("user:")


def test_success_ends_with_reward_one(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    shop_env.step(call("set_qty", item_id="I0001", qty=0))
    _, reward, terminated, _, info = shop_env.step("All done.")
    assert terminated and reward == 1.0
    assert info["reward_components"] == {"state": 1.0, "assertions": 1.0, "answers": 1.0, "outputs": 1.0}


def test_another_path_to_the_same_state_also_passes(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    shop_env.step(call("set_qty", item_id="I0001", qty=7))
    shop_env.step(call("set_qty", item_id="I0001", qty=0))
    _, reward, terminated, _, _ = shop_env.step("done")
    assert terminated and reward == 1.0


def test_wrong_state_scores_zero_when_agent_stops(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    shop_env.step(call("set_qty", item_id="I0002", qty=0))
    _, reward, terminated, _, info = shop_env.step("done ###STOP###")
    assert terminated and reward == 0.0 and info["reward_components"]["state"] == 0.0


def test_an_action_over_the_length_limit_is_refused_and_the_episode_goes_on(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    limit = shop_env.action_space.max_length
    oversized = call("set_qty", item_id="I0001", qty=0) + " 0" * limit
    obs, reward, terminated, truncated, info = shop_env.step(oversized)
    assert "refused" in obs and f"limit of {limit}" in obs and info["action_error"] == "action_too_long"
    assert not (terminated or truncated) and reward == 0.0
    assert shop_env.state is not None and shop_env.state.get("items", "I0001")["qty"] != 0  # not executed
    assert [m["role"] for m in info["messages"]] == ["system", "user"]  # and not said
    shop_env.step(call("set_qty", item_id="I0001", qty=0))
    assert shop_env.step("All done.")[1] == 1.0


def test_an_oversized_message_dict_is_refused_too(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    obs, *_ = shop_env.step({"role": "assistant", "content": "x" * (shop_env.action_space.max_length + 1)})
    assert "refused" in obs


def test_step_after_the_end_is_harmless(shop_env: ToolWorldEnv) -> None:
    shop_env.reset(seed=0)
    shop_env.step("bye ###STOP###")
    obs, reward, terminated, _, _ = shop_env.step("hello?")
    assert terminated and reward == 0.0 and "reset" in obs


def test_failure_rate_injects_transient_errors(shop_world: WorldSpec) -> None:
    tasks = [TaskSpec(id="t", instruction="i", opening="o")]
    env = ToolWorldEnv(data=build_environment(shop_world, tasks), failure_rate=1.0)
    env.reset(seed=0)
    obs, *_ = env.step(call("get_item", item_id="I0001"))
    assert "temporarily unavailable" in obs


def test_hidden_task_data_never_reaches_the_agent() -> None:
    env = gym.make("envgym/retail-v0")
    for seed in range(10):
        obs, info = env.reset(seed=seed)
        task = env.unwrapped.task
        visible = obs + json.dumps(info)
        assert json.dumps(task.solution[-1].arguments) not in visible
        assert all(r not in visible for r in task.rubric)


@pytest.mark.parametrize("env_id", ALL_ENVS)
def test_check_env_passes(env_id: str) -> None:
    check_env(gym.make(env_id).unwrapped)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_env_of_four(mode: str) -> None:
    envs = gym.make_vec("envgym/calculator-v0", num_envs=4, vectorization_mode=mode)
    obs, _ = envs.reset(seed=0)
    assert len(obs) == 4 and len(set(obs)) > 1
    obs, rewards, _, _, _ = envs.step([call("calculate", expression="2 * 3")] * 4)
    assert all('"result": 6' in o for o in obs)
    assert list(rewards) == [0.0] * 4
    envs.close()


def test_register_dir_makes_a_folder_gym_makeable(tmp_path, shop_world: WorldSpec) -> None:
    from envgym.world.files import dump_tasks, dump_world

    folder = tmp_path / "shopx"
    folder.mkdir()
    dump_world(shop_world.model_copy(update={"name": "shopx"}), folder / "world.yaml")
    dump_tasks([TaskSpec(id="t", instruction="i", opening="o")], folder / "tasks.jsonl")
    assert envgym.register_dir(tmp_path) == ["envgym/shopx-v0"]
    assert gym.make("envgym/shopx-v0").reset(seed=0)[1]["task_id"] == "t"
