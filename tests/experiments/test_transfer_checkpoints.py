"""experiments/transfer_checkpoints.py: the behaviour counted from an episode's transcript."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym

import envgym  # noqa: F401  (registers the bundled envs)
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))
from transfer_checkpoints import behaviour

AUTH = "find_user_id_by_email"


def test_an_oracle_retail_episode_counts_every_call_as_answered_and_the_user_as_authenticated() -> None:
    env = gym.make("envgym/retail-v0")
    episode = run_episode(env, OraclePolicy(), seed=0, options={"task_id": "cancel_W0071"})
    assert episode.reward == 1.0
    calls = sum(len(m.get("tool_calls") or []) for m in episode.messages)
    counts = behaviour(episode.messages, AUTH)
    assert counts["calls"] == counts["calls_ok"] == calls == 3
    assert counts["authenticated"] == 1
    assert counts["questions"] == sum(1 for m in episode.messages if m["role"] == "assistant") - calls


def call(name: str, args: str) -> dict[str, str]:
    return {"role": "assistant", "content": f'<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'}


def test_raw_turns_errors_and_a_failed_authentication() -> None:
    opening = [{"role": "system", "content": "policy"}, {"role": "user", "content": "cancel #W0071"},
               {"role": "assistant", "content": "Could you tell me your email?"},
               {"role": "user", "content": "a@example.net"}]
    failed = [*opening, call(AUTH, '{"email": "W0071"}'), {"role": "tool", "content": '{"error": "no user"}'},
              call("get_user_details", '{"user_id": "a@example.net"}'),
              {"role": "tool", "content": '{"error": "no user with id a@example.net"}'}]
    assert behaviour(failed, AUTH) == {"calls": 2, "calls_ok": 0, "questions": 1, "authenticated": 0}
    two = {"role": "assistant", "content": call(AUTH, '{"email": "a@example.net"}')["content"]
           + call("list_user_orders", '{"user_id": "U1"}')["content"]}
    passed = [*opening, two, {"role": "tool", "content": "U0003"}, {"role": "tool", "content": '{"error": "x"}'}]
    assert behaviour(passed, AUTH) == {"calls": 2, "calls_ok": 1, "questions": 1, "authenticated": 1}
    assert behaviour(passed, "cancel_pending_order")["authenticated"] == 0


def test_bfcl_error_answers_are_errors() -> None:
    """BFCL's executor answers a bad call with text, and a backend's refusal is a dict in Python's repr."""
    turns = [{"role": "user", "content": "move the file"}, call("mv", '{"source": "a"}'),
             {"role": "tool", "content": "Error during execution: GorillaFileSystem.mv() missing 1 required "
                                         "positional argument: 'destination'"},
             call("cd", '{"folder": "nowhere"}'), {"role": "tool", "content": "{'error': 'cd: nowhere: No such "
                                                                             "file or directory'}"},
             call("ls", "{}"), {"role": "tool", "content": "{'current_directory_content': ['a']}"}]
    assert behaviour(turns, AUTH) == {"calls": 3, "calls_ok": 1, "questions": 0, "authenticated": 0}
