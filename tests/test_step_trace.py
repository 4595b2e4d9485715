"""Env steps give the recorded observations, rewards and info byte for byte (tests/data/step_trace.json).

The trace was recorded before the step's speed work: episodes on retail, workspace (guard on, an attack planted)
and calculator, with the oracle's turns, malformed and repeated calls, several calls in one turn, an OpenAI message,
an oversized turn, a reply to the user and a stop. Each step is kept as its observation and a digest of everything
it returns; a change in the step's output, however small, fails here. Rewrite the trace only for a change meant to
alter what the env says: `python3 tests/test_step_trace.py --write`.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym

import envgym  # noqa: F401  (registers the environments)
from envgym.play.scripted import scripted_turns
from envgym.protocol import format_tool_call
from envgym.spaces import MAX_TEXT

TRACE = Path(__file__).parent / "data" / "step_trace.json"

ODD_TURNS = [
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>',
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>',  # a repeat
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#NOPE"}}</tool_call>',
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": 7}}</tool_call>',
    '<tool_call>{"name": "get_order_details", "arguments": {}}</tool_call>',
    '<tool_call>{"name": "no_such_tool", "arguments": {"a": "b"}}</tool_call>',
    "<tool_call>{not json</tool_call>",
    'Two at once <tool_call>{"name": "get_user_details", "arguments": {"user_id": "U0022"}}</tool_call>\n'
    '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0002"}}</tool_call> done',
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "x1", "type": "function",
         "function": {"name": "get_order_details", "arguments": '{"order_id": "#W0003"}'}}]},
    "[get_order_details(order_id='#W0004')]",
    "x" * (MAX_TEXT + 1),  # refused
    "Could you tell me more about what you need?",
]


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _play(env_id: str, kwargs: dict[str, Any], options: dict[str, Any], turns: list[Any] | None) -> list[list[str]]:
    env = gym.make(env_id, **kwargs).unwrapped
    obs, info = env.reset(seed=3, options=options)
    steps = [[obs, _digest(info)]]
    if turns is None:  # the oracle's script for the task drawn
        turns = [*scripted_turns(env.data.world, env.data.task(info["task_id"])), "###STOP###"]
    for turn in turns:
        obs, reward, terminated, truncated, info = env.step(turn)
        info = {k: v for k, v in info.items() if k != "wall_s"}
        steps.append([obs, _digest([reward, terminated, truncated, info])])
        if terminated or truncated:
            break
    return steps


def episodes() -> dict[str, list[list[str]]]:
    search = format_tool_call("search_emails", {"query": "Coffee machine broken"})
    return {
        "retail oracle": _play("envgym/retail-v0", {}, {}, None),
        "retail odd turns": _play("envgym/retail-v0", {"max_steps": 30}, {}, [*ODD_TURNS, "###STOP###"]),
        "retail bare odd turns": _play("envgym/retail-v0", {"guard": False, "tool_rewards": False}, {},
                                       [*ODD_TURNS, "###STOP###"]),
        "workspace oracle": _play("envgym/workspace-v0", {}, {"task_id": "forward_E0012"}, None),
        "workspace attacked": _play("envgym/workspace-v0", {"attack": None}, {
            "task_id": "forward_E0012", "attack": _first_attack()}, [search, search, "###STOP###"]),
        "calculator oracle": _play("envgym/calculator-v0", {}, {}, None),
        "calculator truncated": _play("envgym/calculator-v0", {"max_steps": 2}, {}, ["1+1?", "2+2?", "3+3?"]),
    }


def _first_attack() -> str:
    env = gym.make("envgym/workspace-v0").unwrapped
    assert env.security.attacks is not None
    return sorted(env.security.attacks.attack_ids())[0]


def test_steps_give_the_recorded_observations_rewards_and_info() -> None:
    recorded = json.loads(TRACE.read_text())
    played = episodes()
    assert played.keys() == recorded.keys()
    for name, steps in played.items():
        assert len(steps) == len(recorded[name]), name
        for i, (step, want) in enumerate(zip(steps, recorded[name], strict=True)):
            assert step[0] == want[0], f"{name}, step {i}: observation"
            assert step[1] == want[1], f"{name}, step {i}: reward, terminated, truncated or info"


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    TRACE.parent.mkdir(exist_ok=True)
    TRACE.write_text(json.dumps(episodes(), indent=1, ensure_ascii=False) + "\n")
