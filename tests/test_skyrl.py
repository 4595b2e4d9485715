"""envgym worlds through SkyRL-gym's own registry and text-env interface (envgym.integrations.skyrl): an oracle and a
random episode driven through `skyrl_gym.make` match the same episodes in-process, on retail, travel, workspace and
a synthesized world."""

from __future__ import annotations

from typing import Any

import pytest
import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv

from envgym.env import ToolWorldEnv
from envgym.integrations.skyrl import dataset_rows, register_worlds
from envgym.loader import load_environment
from envgym.play.policies import OraclePolicy, RandomPolicy
from envgym.registry import env_dirs, find_env_dir, register_dir
from synth.pipeline import SynthConfig, run_pipeline

MAX_STEPS = 12


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """label -> envgym name: three bundled worlds and one synthesized, all registered in SkyRL-gym."""
    suite = tmp_path_factory.mktemp("synth") / "suite"
    run_pipeline(SynthConfig(seed=3, domains=1, tasks_per_env=4), suite)
    register_dir(suite)
    register_worlds()
    return {"retail": "retail", "travel": "travel", "workspace": "workspace", "synth": env_dirs(suite)[0].name}


def drive_skyrl(name: str, policy: Any, task_id: str, seed: int) -> tuple[float, str, list[dict[str, Any]]]:
    """An episode as SkyRL's generator drives it: init, then step(text) until done; the policy sees the
    conversation SkyRL holds (init's messages, its own turns, the observations)."""
    env = skyrl_gym.make(f"envgym-{name}", env_config={"max_steps": MAX_STEPS},
                         extras={"task_id": task_id, "seed": seed})
    assert isinstance(env, BaseTextEnv)
    conversation, metadata = env.init([{"role": "user", "content": "replaced by the env"}])
    info = {"env_name": metadata["env_name"], "task_id": metadata["task_id"], "tools": metadata["tools"],
            "messages": list(conversation), "tool_errors": []}
    out: dict[str, Any] = {"done": False}
    while not out["done"]:
        action = policy.act("", info)
        out = dict(env.step(action))
        info["messages"] += [{"role": "assistant", "content": action}, *out["observations"]]
        info["tool_errors"] = out["metadata"]["tool_errors"]
    env.close()
    return out["reward"], out["metadata"]["state_hash"], info["messages"]


def drive_in_process(name: str, policy: Any, task_id: str, seed: int) -> tuple[float, str, list[dict[str, Any]]]:
    env = ToolWorldEnv(data=load_environment(str(find_env_dir(name))), max_steps=MAX_STEPS)
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    done, reward = False, 0.0
    while not done:
        obs, r, terminated, truncated, info = env.step(policy.act(obs, info))
        reward, done = float(r), terminated or truncated
    return reward, info["state_hash"], info["messages"]


def turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(role, text) after the system prompt: SkyRL's holds the raw text turns, envgym's the parsed calls."""
    return [(m["role"], m.get("content") or "") for m in messages[1:] if m["role"] != "assistant"]


@pytest.mark.parametrize("label", ["retail", "travel", "workspace", "synth"])
def test_skyrl_make_plays_oracle_and_random_episodes_as_in_process(label: str, worlds: dict[str, str]) -> None:
    name = worlds[label]
    data = load_environment(str(find_env_dir(name)))
    task = data.tasks[0].id
    reward, state_hash, messages = drive_skyrl(name, OraclePolicy(data), task, seed=3)
    assert (reward, state_hash) == drive_in_process(name, OraclePolicy(data), task, seed=3)[:2]
    assert reward == 1.0
    reward, state_hash, messages = drive_skyrl(name, RandomPolicy(seed=5), task, seed=4)
    expected = drive_in_process(name, RandomPolicy(seed=5), task, seed=4)
    assert (reward, state_hash) == expected[:2] and reward < 1.0
    assert turns(messages) == turns(expected[2])  # the same tool results and user replies, in order


def test_the_system_prompt_describes_the_tools_and_rows_hide_the_task(worlds: dict[str, str]) -> None:
    env = skyrl_gym.make("envgym-retail", extras={"task_id": "return_W0049", "seed": 0})
    conversation, metadata = env.init([])
    assert conversation[0]["role"] == "system" and all(
        t["function"]["name"] in conversation[0]["content"] for t in metadata["tools"])
    rows = dataset_rows("retail")
    data = load_environment(str(find_env_dir("retail")))
    assert [r["task_id"] for r in rows] == [t.id for t in data.tasks]
    assert all(r["env_class"] == "envgym-retail" for r in rows)
    instructions = {t.id: t.instruction for t in data.tasks}
    assert all(instructions[r["task_id"]] not in r["prompt"][0]["content"] for r in rows)


def test_unknown_config_keys_are_named() -> None:
    register_worlds()
    with pytest.raises(ValueError, match=r"unknown keys \['max_turnz'\]"):
        skyrl_gym.make("envgym-retail", env_config={"max_turnz": 3}, extras={})


def test_registering_twice_is_a_no_op() -> None:
    assert register_worlds() == register_worlds()
