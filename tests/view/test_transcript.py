"""`envgym run` shows what an episode did: its turns, calls, results and why it got its reward."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.make import make_policy
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir
from envgym.users import STOP
from envgym.view.explain import explain
from envgym.view.records import RecordError, read_records, record_from_trajectory
from envgym.view.terminal import print_transcript

RETAIL = load_environment(str(find_env_dir("retail")))


def render(record: Any) -> str:
    out = io.StringIO()
    print_transcript(Console(file=out, width=240, color_system=None), record, explain(record, RETAIL))
    return out.getvalue()


def a_return_task() -> Any:
    return next(t for t in RETAIL.tasks if [c.name for c in t.solution][-1:] == ["return_delivered_order"])


class WrongOrderPolicy:
    """Returns a delivered order the task did not ask for, without authenticating or asking, then leaves."""

    def __init__(self, order_id: str):
        self.order_id = order_id

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if sum(m["role"] == "assistant" for m in info["messages"]) == 0:
            return format_tool_call("return_delivered_order", {"order_id": self.order_id})
        return f"Done. {STOP}"


def test_run_prints_the_first_episode_turn_by_turn(capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "240")
    task = a_return_task()
    assert main(["run", "retail", "--task", task.id]) == 0
    out = capsys.readouterr().out
    for call in task.solution:  # each call with its arguments, and its result
        assert f"→ call  {call.name}({json.dumps(call.arguments, ensure_ascii=False)})" in out
        assert f"← {call.name} " in out
    assert "user      " in out and "assistant " in out
    assert "rule_confirm ✓" in out and "world state equals the task's target" in out
    assert out.index("world state equals") < out.index("mean_reward")  # transcript first, then the table


def test_quiet_prints_the_table_only_and_show_prints_more(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "retail", "--quiet", "--episodes", "2"]) == 0
    quiet = capsys.readouterr().out
    assert "→ call" not in quiet and "mean_reward" in quiet
    assert main(["run", "retail", "--show", "2", "--episodes", "3"]) == 0
    shown = capsys.readouterr().out
    assert "episode 1/2" in shown and "episode 2/2" in shown and "episode 3/" not in shown


def test_a_write_without_the_users_yes_names_the_rule_at_the_call() -> None:
    env = ToolWorldEnv(data=RETAIL, confirm="deny", guard=False)
    trajectory = run_episode(env, make_policy("skip-confirm"), seed=0, options={"task_id": a_return_task().id})
    assert trajectory.reward_components["rule_confirm"] == 0.0
    out = render(record_from_trajectory(trajectory))
    lines = out.splitlines()
    write = next(i for i, line in enumerate(lines) if line.startswith("  ← return_delivered_order"))
    assert "✗ broke rule_confirm" in lines[write + 1]
    assert "✗ rule_confirm: a write was attempted without the user's yes to it first" in out


def test_a_wrong_write_shows_the_state_diff_against_the_target() -> None:
    task = a_return_task()
    wanted = task.solution[-1].arguments["order_id"]
    other = next(k for k, o in RETAIL.initial.tables["orders"].items() if o["status"] == "delivered" and k != wanted)
    env = ToolWorldEnv(data=RETAIL, guard=False)
    trajectory = run_episode(env, WrongOrderPolicy(other), seed=0, options={"task_id": task.id})
    why = explain(record_from_trajectory(trajectory), RETAIL)
    assert {(c["key"], c["field"], c["episode"], c["target"]) for c in why.diff} == {
        (other, "status", "return requested", "delivered"), (wanted, "status", "delivered", "return requested")}
    out = render(record_from_trajectory(trajectory))
    assert "world state against the task's target" in out and f"│ {other} " in out and "✗ state:" in out


def test_a_record_the_env_does_not_reproduce_gets_no_diff() -> None:
    env = ToolWorldEnv(data=RETAIL, guard=False)
    trajectory = run_episode(env, WrongOrderPolicy("#W0001"), seed=0, options={"task_id": a_return_task().id})
    record = record_from_trajectory(trajectory)
    record.messages[-1] = {**record.messages[-1], "content": "a user turn the scripted user never said"}
    why = explain(record, RETAIL)
    assert why.diff == [] and why.replay_note is not None and "another conversation" in why.replay_note


def test_a_bad_trajectory_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text('{"env_name": "retail", "task_id": "x", "messages": []}\n{"env_name": "retail"}\n')
    with pytest.raises(RecordError, match=r"t.jsonl:2: no 'messages'"):
        read_records(path)


WORKSPACE = load_environment(str(find_env_dir("workspace")))


def test_a_call_the_guard_refused_shows_its_reasons_at_the_call() -> None:
    from envgym.play.policies import AttackerPolicy

    env = ToolWorldEnv(data=WORKSPACE)
    assert env.security.attacks is not None
    attack = env.security.attacks.attack_ids()[0]
    trajectory = run_episode(env, AttackerPolicy(env), seed=0,
                             options={"task_id": WORKSPACE.tasks[0].id, "attack": attack})
    assert trajectory.guard and not trajectory.guard[0]["approved"]
    record = record_from_trajectory(trajectory)
    why = explain(record, WORKSPACE)
    assert why.replay_note is None and why.guard[0]["reasons"]
    out = io.StringIO()
    print_transcript(Console(file=out, width=400, color_system=None), record, why)
    held = f"⚑ guard held {why.guard[0]['tool']} (denied): {why.guard[0]['reasons'][0]}"
    assert held in out.getvalue()


def test_a_held_call_that_was_approved_replays_to_its_effect_on_the_world() -> None:
    from envgym.play.policies import AttackerPolicy

    env = ToolWorldEnv(data=WORKSPACE, confirm=lambda verdict: True)  # whoever confirms says yes to everything
    assert env.security.attacks is not None
    attack = env.security.attacks.attack_ids()[0]
    trajectory = run_episode(env, AttackerPolicy(env), seed=0,
                             options={"task_id": WORKSPACE.tasks[0].id, "attack": attack})
    assert trajectory.guard and all(h["approved"] for h in trajectory.guard)
    why = explain(record_from_trajectory(trajectory), WORKSPACE)
    assert why.replay_note is None and [h["approved"] for h in why.guard] == [True] * len(trajectory.guard)
    assert all(h["reasons"] for h in why.guard)
    assert any(change["kind"] == "extra" for change in why.diff)  # what the approved call added to the world
