"""Property test: random strings and malformed tool calls never raise; malformed calls get error observations.

6,000 examples in all (3 environments x 2,000).
"""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ENVS = ["envgym/retail-v0", "envgym/travel-v0", "envgym/calculator-v0"]
EXAMPLES_PER_ENV = 2000

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
tool_names = st.sampled_from(["get_order_details", "calculate", "search_flights", "cancel_reservation"]) | st.text(
    max_size=15)


@st.composite
def malformed_call(draw: Any) -> tuple[Any, bool]:
    """(action, must_error): a tool call that is broken in some way the env has to explain."""
    kind = draw(st.sampled_from(["bad_json", "bad_args", "no_name", "random_json", "dict_action", "unclosed"]))
    name = draw(tool_names)
    if kind == "bad_json":
        return f"<tool_call>{draw(st.text(max_size=40))}{{</tool_call>", True
    if kind == "bad_args":
        args = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4).filter(bool))
        args["__unexpected__"] = 1
        return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>", True
    if kind == "no_name":
        return f"<tool_call>{json.dumps({'arguments': draw(json_values)})}</tool_call>", True
    if kind == "random_json":
        return f"<tool_call>{json.dumps(draw(json_values))}</tool_call>", False
    if kind == "dict_action":
        calls = [{"id": draw(st.text(max_size=5)), "function": {"name": name, "arguments": draw(st.text(max_size=30))}}]
        return {"role": "assistant", "content": draw(st.text(max_size=20)), "tool_calls": calls}, False
    return f"<tool_call>{json.dumps({'name': name})[:-1]}", True


actions = st.one_of(st.text(max_size=200).map(lambda s: (s, False)), malformed_call())


@pytest.mark.parametrize("env_id", ENVS)
def test_random_actions_never_raise(env_id: str) -> None:
    env = gym.make(env_id, max_steps=10**6).unwrapped
    env.reset(seed=0)
    count = {"n": 0}

    @settings(max_examples=EXAMPLES_PER_ENV, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(actions)
    def check(example: tuple[Any, bool]) -> None:
        action, must_error = example
        obs, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(obs, str) and isinstance(reward, float)
        if must_error:
            assert '"error"' in obs, (action, obs)
        if terminated or truncated:
            env.reset()
        count["n"] += 1

    check()
    assert count["n"] >= EXAMPLES_PER_ENV
