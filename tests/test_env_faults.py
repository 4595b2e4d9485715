"""Faults inside the env never escape step(): a crashing tool and a failing hidden replay become observations/info."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.env import ToolWorldEnv
from envgym.protocol import format_tool_call

WORLD = """\
name: {name}
system_prompt: You help with notes.
max_steps: 6
hooks:
  on_reset: tools:open_episode
tools:
  - name: explode
    description: A tool with a bug.
    parameters: {{type: object, properties: {{}}, additionalProperties: false}}
    python: tools:explode
  - name: save_note
    description: Save a note; needs the episode's connection, like code-v0's sandbox.
    parameters: {{type: object, properties: {{text: {{type: string}}}}, required: [text], additionalProperties: false}}
    python: tools:save_note
"""

TOOLS = '''
from envgym.world.tools import ToolError


def open_episode(state, task, rng):
    state.resources["connection"] = "open"


def explode(state):
    return {"ratio": 1 / 0}


def save_note(state, text):
    # A replay runs on a fresh copy without the episode's resources: like a sandbox that timed out.
    if state.resources.get("connection") != "open":
        raise ToolError("save_note: the connection timed out")
    return {"saved": text}
'''


def _env(tmp_path: Path, name: str) -> ToolWorldEnv:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "world.yaml").write_text(WORLD.format(name=name))
    (folder / "tools.py").write_text(TOOLS)
    task = {"id": "t1", "instruction": "Save the note 'hi'.", "opening": "Please save the note 'hi'.",
            "solution": [{"name": "save_note", "arguments": {"text": "hi"}}], "final_reply": "Saved."}
    (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    env = ToolWorldEnv(folder)
    env.reset(seed=0)
    return env


def test_a_tool_raising_a_bug_gives_an_error_observation_naming_tool_and_exception(tmp_path: Path) -> None:
    env = _env(tmp_path, "crashing")
    obs, reward, terminated, truncated, info = env.step(format_tool_call("explode", {}))
    assert "explode" in obs and "ZeroDivisionError" in obs
    assert info["tool_errors"] == ["tool_crashed"] and not (terminated or truncated) and reward == 0.0
    obs, *_ = env.step(format_tool_call("save_note", {"text": "hi"}))
    assert '"saved"' in obs  # the episode goes on


def test_a_failing_hidden_replay_ends_the_episode_with_reward_zero_and_a_grading_error(tmp_path: Path) -> None:
    env = _env(tmp_path, "flaky")
    assert '"saved"' in env.step(format_tool_call("save_note", {"text": "hi"}))[0]
    obs, reward, terminated, _, info = env.step("Saved. ###STOP###")
    assert terminated and reward == 0.0
    assert "ReplayError" in info["grading_error"] and "save_note" in info["grading_error"]
    assert "timed out" not in obs  # grading is hidden from the agent


@pytest.mark.parametrize("action", ["Saved, all done.", format_tool_call("save_note", {"text": "x"})])
def test_grading_mid_episode_survives_a_failing_replay(tmp_path: Path, action: str) -> None:
    # A reply to the user asks the scripted user whether the goal is reached; a write measures progress toward
    # the target for per-call rewards: both replay the reference solution.
    env = _env(tmp_path, "midway" if action.startswith("Saved") else "progress")
    obs, reward, *_ = env.step(action)
    assert reward == 0.0 and isinstance(obs, str)
