"""Training suites cut from synthesized envs, and the fair planner that first asks what the user needs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.registry import env_dirs
from synth.planner import OPEN_QUESTION, FairPlanner
from synth.program import Program
from synth.rollouts import unseen_values
from synth.subsets import fair_demonstrations, kind_subset

KINDS = ("mechanism", "lookup")


def test_open_first_planner_solves_every_task_from_the_conversation_alone(small_suite: Path) -> None:
    """Every task of every kind: the request reaches the conversation before any call (the user's own words, no
    fact in them), no value is used before it was shown, each fact is asked for once and given only then, and the
    task is solved."""
    played = 0
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder))
        env = ToolWorldEnv(data=data)
        for task in data.tasks:
            if "program" not in task.meta:
                continue
            planner = FairPlanner(Program.model_validate(task.meta["program"]), open_first=True)
            trajectory = run_episode(env, planner, seed=0, options={"task_id": task.id})
            assert trajectory.reward == 1.0, (folder.name, task.id, trajectory.reward_components)
            assert unseen_values(trajectory.messages) == []
            said = [m["content"] for m in trajectory.messages if m["role"] == "assistant" and m.get("content")]
            heard = [m["content"] for m in trajectory.messages if m["role"] == "user"]
            assert said[0] == OPEN_QUESTION
            assert heard[1] == task.meta["request"] and not any(v in heard[1] for v in task.user_known.values())
            questions = [s for s in said if s.startswith("Could you tell me")]
            assert len(questions) == len(set(questions)) <= len(task.user_known)  # a branch not taken asks less
            played += 1
    assert played >= 20  # every kept task of the small suite (3 domains, 10 draws each)


def test_kind_subset_keeps_one_kind_its_tools_and_holds_out_whole_users(small_suite: Path, tmp_path: Path) -> None:
    source = small_suite / "print_services"
    rows = [json.loads(line) for line in (source / "tasks.jsonl").read_text().splitlines()]
    folder, summary = kind_subset(source, tmp_path, kinds=KINDS, heldout=1, seed=0)
    data = load_environment(str(folder))
    kept = [t for t in data.tasks]
    assert {t.meta["kind"] for t in kept} <= set(KINDS)
    assert len(kept) == sum(r.get("meta", {}).get("kind") in KINDS for r in rows) >= 3
    used = {call.name for t in kept for call in t.solution}
    assert {tool.name for tool in data.world.tools} == used == set(summary["tools"])
    assert not any(name in (folder / "policy.md").read_text() for name in summary["tools_dropped"])

    def user(task: object) -> str:
        return json.dumps(task.solution[0].arguments, sort_keys=True)  # type: ignore[attr-defined]

    assert user(kept[-1]) not in {user(t) for t in kept[:-1]}
    demos = fair_demonstrations(folder, [t.id for t in kept])
    assert [d["task_id"] for d in demos] == [t.id for t in kept]
    with pytest.raises(ValueError, match=f"cannot give {len(kept)} held-out tasks and a training set"):
        kind_subset(source, tmp_path / "again", kinds=KINDS, heldout=len(kept), seed=0)
