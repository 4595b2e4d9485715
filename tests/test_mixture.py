"""MixtureEnv: several folder envs behind one, their episodes unchanged, the first env's held-out tail last."""

from __future__ import annotations

import json
import pickle

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.mixture import SEPARATOR, MixtureEnv
from envgym.world.errors import UnknownTaskError

IDS = ["envgym/retail-v0", "envgym/travel-v0"]


def call(name: str, **args: object) -> str:
    return f'<tool_call>{json.dumps({"name": name, "arguments": args})}</tool_call>'


def test_tasks_of_every_env_the_first_envs_last_under_their_own_ids() -> None:
    mixture = MixtureEnv(IDS)
    retail, travel = (gym.make(i).unwrapped.data.tasks for i in IDS)
    ids = [t.id for t in mixture.data.tasks]
    assert ids == [f"envgym/travel-v0{SEPARATOR}{t.id}" for t in travel] + [t.id for t in retail]
    assert mixture.data.task(ids[0]).solution == travel[0].solution
    assert mixture.data.directory == gym.make(IDS[0]).unwrapped.data.directory


@pytest.mark.parametrize("which", [0, 1])
def test_an_episode_is_the_inner_envs_step_for_step(which: int) -> None:
    mixture, inner = MixtureEnv(IDS), gym.make(IDS[which]).unwrapped
    task = inner.data.tasks[3]
    name = task.id if which == 0 else f"{IDS[which]}{SEPARATOR}{task.id}"
    got = [mixture.reset(seed=7, options={"task_id": name})]
    want = [inner.reset(seed=7, options={"task_id": task.id})]
    first_tool = want[0][1]["tools"][0]["function"]["name"]
    for action in (call(first_tool), "not a tool call {", "I could not find it, sorry."):
        got.append(mixture.step(action))
        want.append(inner.step(action))
    for mine, theirs in zip(got, want, strict=True):
        *values, info = mine
        *expected, expected_info = theirs
        assert values == expected
        assert info["task_id"] == name and {**info, "task_id": task.id} == expected_info


def test_unknown_task_names_itself_and_bad_ids_are_refused() -> None:
    mixture = MixtureEnv(IDS)
    with pytest.raises(UnknownTaskError, match="no-such-task"):
        mixture.reset(options={"task_id": "no-such-task"})
    with pytest.raises(RuntimeError, match="before reset"):
        mixture.step("hi")
    with pytest.raises(ValueError, match="twice"):
        MixtureEnv([IDS[0], IDS[0]])
    with pytest.raises(ValueError, match="non-empty"):
        MixtureEnv([])
    with pytest.raises(ValueError, match="lists no tasks"):
        MixtureEnv([IDS[0], "envgym/bfcl-v0"])


def test_check_env_pickle_and_a_registered_id() -> None:
    check_env(MixtureEnv(IDS))
    gym.register("envgym/test-mixture-v0", entry_point="envgym.mixture:MixtureEnv", kwargs={"env_ids": IDS})
    try:
        env = gym.make("envgym/test-mixture-v0")
        _, info = env.reset(seed=1)  # no task named: one drawn from every env's tasks by the seed
        assert info["task_id"] in {t.id for t in env.unwrapped.data.tasks}
        clone = pickle.loads(pickle.dumps(env.unwrapped))
        assert [t.id for t in clone.data.tasks] == [t.id for t in env.unwrapped.data.tasks]
    finally:
        del gym.registry["envgym/test-mixture-v0"]
