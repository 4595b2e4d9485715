"""What the scripted user says in a synthesized suite: each task played by the open-first fair planner (it asks "How
can I help you today?", then for each fact it needs) and by the no-tool control (it echoes the user).

Counts, over every user turn: turns that recite the task's role-play instruction (its first 30 characters), turns
that state a fact the agent had not asked for (a `user_known` value in a reply to a turn naming no fact), and the
rewards; over every task's request (`meta["request"]`), those that read out a tool the task calls (its name in
words, "get visit version", or its verb and object, "delete run"). Prints one JSON object. Example (issue 38, docs/results/synth_v3.md):
`python experiments/user_turns.py /tmp/suite`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.registry import env_dirs
from envgym.users import _aliases

# Run as a script, this file's folder comes first on sys.path; keep `synth` the package.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from synth.notool import NoToolPolicy  # noqa: E402
from synth.planner import FairPlanner  # noqa: E402
from synth.program import Program  # noqa: E402


def _turns(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(what the agent said, the user's reply) for every user turn after the opening."""
    pairs, said = [], None
    for m in messages:
        if m["role"] == "assistant" and m.get("content"):
            said = str(m["content"])
        elif m["role"] == "user" and said is not None:
            pairs.append((said, str(m["content"])))
            said = None
    return pairs


def reads_out_a_tool(request: str, tools: Iterable[str]) -> bool:
    """Whether `request` says a tool's name in words or its first and last word ("delete run" for `delete_run`)."""
    text = " " + re.sub(r"[,.;:?!()]", " ", request.lower()) + " "
    for tool in tools:
        parts = tool.lower().split("_")
        if any(f" {copied} " in text for copied in (" ".join(parts), f"{parts[0]} {parts[-1]}")):
            return True
    return False


def count(root: Path) -> dict[str, Any]:
    out = {"tasks": 0, "user_turns": 0, "recitals": 0, "unasked_facts": 0, "fair_open_first_reward_1": 0,
           "no_tool_reward_0": 0, "requests_reading_out_a_tool": 0}
    for folder in env_dirs(root):
        data = load_environment(str(folder))
        env = ToolWorldEnv(data=data)
        for task in data.tasks:
            out["tasks"] += 1
            out["requests_reading_out_a_tool"] += reads_out_a_tool(str(task.meta.get("request", "")), task.meta["tools"])
            fair = FairPlanner(Program.model_validate(task.meta["program"]), open_first=True)
            played = [run_episode(env, fair, seed=0, options={"task_id": task.id}),
                      run_episode(env, NoToolPolicy(), seed=0, options={"task_id": task.id})]
            out["fair_open_first_reward_1"] += played[0].reward == 1.0
            out["no_tool_reward_0"] += played[1].reward == 0.0
            for episode in played:
                for agent, user in _turns(episode.messages):
                    out["user_turns"] += 1
                    out["recitals"] += task.instruction[:30] in user
                    names = task.meta.get("fact_names") or {}
                    asked = any(a in agent.lower() for k in task.user_known for a in _aliases(k, names.get(k, "")))
                    out["unasked_facts"] += not asked and any(v in user for v in task.user_known.values())
        env.close()
    return out


if __name__ == "__main__":
    print(json.dumps(count(Path(sys.argv[1])), sort_keys=True))
