"""An LLM user simulator in synth rollouts (issue 15, part 5): the user model runs through the record/replay
cache, so a recorded run replays with no model and gives the same trajectories; a reply that speaks as the agent is
replaced by the scripted user's reply to that turn."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from envgym.llm import CachedChatModel, ScriptedChatModel
from envgym.users import user_reply_problem
from envgym.world.spec import TaskSpec, ToolCall
from synth.rollouts import passes, rollout

AGENT_LINE = "Sure, here is what I found for you."


def _user(messages: list[dict[str, Any]], tools: object) -> str:
    """A user model: says yes to a go-ahead question, otherwise states what it knows, except that every third
    reply slips into the agent's voice."""
    _user.calls = getattr(_user, "calls", 0) + 1  # type: ignore[attr-defined]
    if _user.calls % 3 == 0:  # type: ignore[attr-defined]
        return AGENT_LINE
    agent = str(messages[-1]["content"]).lower()
    if re.search(r"\b(shall|should|may|can) i\b|confirm|go ahead|proceed", agent):
        return "Yes, please go ahead."
    known = re.findall(r"^- (\w+): (.+)$", str(messages[0]["content"]), flags=re.M)
    return " ".join(f"My {k.replace('_', ' ')} is {v}." for k, v in known)


def test_llm_user_rollouts_replay_offline_and_agent_voiced_replies_are_replaced(
        small_suite: Path, tmp_path: Path) -> None:
    cache = tmp_path / "user_cache.jsonl"
    recorded = CachedChatModel(ScriptedChatModel(reply_fn=_user, name="user"), cache, mode="record")
    first = rollout(small_suite, tmp_path / "a.jsonl", policy="fair", n=1, max_tasks=4, user="llm",
                    user_model=recorded)
    users = [str(m["content"]) for r in first for m in r["messages"] if m["role"] == "user"]
    assert AGENT_LINE not in users and any(u.startswith("My ") for u in users)
    assert sum(passes(r) for r in first) >= 3
    offline = CachedChatModel(ScriptedChatModel(replies=[], name="user"), cache, mode="replay")
    rollout(small_suite, tmp_path / "b.jsonl", policy="fair", n=1, max_tasks=4, user="llm", user_model=offline)
    assert (tmp_path / "b.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()


def test_a_user_reply_is_refused_when_it_breaks_the_part() -> None:
    task = TaskSpec(id="t", instruction="Cancel order O-1.", opening="Hi.",
                    solution=[ToolCall(name="cancel_order", arguments={"order_id": "O-1"})])
    assert user_reply_problem("My order id is O-1.", task) is None
    assert user_reply_problem("  ", task) == "empty"
    assert user_reply_problem("How can I help you today?", task) == "speaks as the agent"
    assert user_reply_problem("Please call cancel_order for O-1.", task) == "names the tool 'cancel_order'"
    assert user_reply_problem('<tool_call>{"name": "x", "arguments": {}}</tool_call>', task) == "a tool call"
