"""`envgym optimize`: the search on the real calculator environment with scripted chat models.

The acting model is a script whose behaviour depends on its system message (it calls the calculator only when told
to), and the reflector is a script returning edits: the inputs of the optimizer under test. What is asserted is the
optimizer's own behaviour: which candidates it keeps, the front, the playbook it builds, held-out success, that a
seed repeats byte for byte, and that a bad reply is logged and rejected.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.llm import CachedChatModel, CacheMissError, ScriptedChatModel
from envgym.loader import load_environment
from envgym.optimize import OptimizeConfig, Optimizer, OptimizeResult, PlaybookItem, Reflector
from envgym.optimize.report import write_result
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir

USE_TOOL = "Call calculate for every product."


def _numbers(messages: list[dict[str, Any]]) -> tuple[int, int]:
    opening = next(m["content"] for m in messages if m["role"] == "user")
    a, b = (int(x) for x in re.findall(r"\d+", opening)[:2])
    return a, b


def act(messages: list[dict[str, Any]], tools: Any) -> str:
    """The scripted agent: it calls the tool when its system message says so for this task's first number (always,
    or only for odd / even ones), else it guesses."""
    system = messages[0]["content"]
    a, b = _numbers(messages)
    told = USE_TOOL in system or (f"{(a % 2 and 'odd') or 'even'} first numbers" in system)
    results = [m for m in messages if m["role"] == "tool"]
    if not told:
        return "It is about 42."
    if results:
        return f"The product is {json.loads(results[-1]['content'])['result']}."
    return format_tool_call("calculate", {"expression": f"{a} * {b}"})


@pytest.fixture(scope="module")
def env() -> ToolWorldEnv:
    return ToolWorldEnv(data=load_environment(str(find_env_dir("calculator"))))


def seed_prompt(env: ToolWorldEnv) -> str:
    return str(env.reset(seed=0)[1]["messages"][0]["content"])


def optimize(env: ToolWorldEnv, reflector: Any, *, playbook: bool = False, policy: Any = None,
             **config: Any) -> OptimizeResult:
    settings = {"train_tasks": 3, "heldout_tasks": 3, "iterations": 2, "minibatch": 2, **config}
    optimizer = Optimizer(env, policy or ScriptedChatModel(reply_fn=act), Reflector(reflector, playbook=playbook),
                          OptimizeConfig(playbook=playbook, **settings))
    return optimizer.run(seed_prompt(env))


def edit(prompt: str) -> str:
    return json.dumps({"critique": "It guessed the product instead of calling the tool.", "prompt": prompt})


def test_a_reflection_that_helps_replaces_the_seed_on_the_front_and_lifts_heldout(env: ToolWorldEnv) -> None:
    result = optimize(env, ScriptedChatModel([edit(f"You are careful.\n{USE_TOOL}")]), iterations=1)
    assert [c.id for c in result.candidates] == ["c0", "c1"]
    assert result.scores["c1"] == dict.fromkeys(result.train, 1.0)
    assert result.front == ["c1"] and result.best == "c1"
    assert (sum(result.heldout_before), sum(result.heldout_after)) == (0, 3)
    assert result.candidate("c1").critique.startswith("It guessed")


def test_the_reflector_sees_the_parent_prompt_and_the_failed_conversation(env: ToolWorldEnv) -> None:
    reflector = ScriptedChatModel([edit(USE_TOOL)])
    optimize(env, reflector, iterations=1)
    shown = reflector.calls[0][1]["content"]
    assert seed_prompt(env) in shown and "assistant: It is about 42." in shown and "Failed conversation 2" in shown


def test_a_reflection_that_does_not_help_is_not_kept(env: ToolWorldEnv) -> None:
    result = optimize(env, ScriptedChatModel([edit("Answer quickly.")]), iterations=1)
    assert [c.id for c in result.candidates] == ["c0"] and result.front == ["c0"]
    assert [e["event"] for e in result.events if e["event"] not in ("episode", "accepted", "done")] == [
        "proposed", "not_better"]


@pytest.mark.parametrize(("reply", "reason"), [
    ("Use the tool more.", "holds no JSON object"),
    ('```json\n["a list"]\n```', "is a list, not an object"),
    (edit("placeholder"), "unchanged"),
])
def test_bad_reflector_output_is_logged_and_the_run_goes_on(env: ToolWorldEnv, reply: str, reason: str) -> None:
    reply = reply.replace("placeholder", json.dumps(seed_prompt(env))[1:-1])
    result = optimize(env, ScriptedChatModel([reply, edit(USE_TOOL)]), iterations=2)
    rejected = [e for e in result.events if e["event"] == "rejected"]
    assert len(rejected) == 1 and reason in rejected[0]["reason"] and rejected[0]["iteration"] == 0
    best = result.candidate(result.best)  # the second, good reply still counted
    assert (best.prompt, best.origin, sum(result.heldout_after)) == (USE_TOOL, "reflection", 3)


def test_front_keeps_two_specialists_and_a_merge_unites_them(env: ToolWorldEnv) -> None:
    def reflect(messages: list[dict[str, Any]], tools: Any) -> str:
        first = int(re.search(r"user: What is (\d+)", messages[1]["content"]).group(1))  # type: ignore[union-attr]
        return edit(f"Careful.\nCall calculate for {(first % 2 and 'odd') or 'even'} first numbers.")

    result = optimize(env, ScriptedChatModel(reply_fn=reflect), train_tasks=4, minibatch=1, iterations=3,
                      merge_every=3, seed=1)
    origins = {c.id: c.origin for c in result.candidates}
    assert list(origins.values()) == ["seed", "reflection", "reflection", "merge"]
    specialists = [c for c in result.candidates if c.origin == "reflection"]
    assert {"odd first numbers" in c.prompt for c in specialists} == {True, False}
    merged = result.candidates[-1]
    assert set(merged.parents) == {c.id for c in specialists}
    assert "odd first numbers" in merged.prompt and "even first numbers" in merged.prompt
    assert result.front == [merged.id] and result.scores[merged.id] == dict.fromkeys(result.train, 1.0)
    front_events = [e["front"] for e in result.events if e["event"] == "accepted"]
    assert sorted(front_events[2]) == sorted(c.id for c in specialists)  # both kept before the merge


def test_playbook_grows_by_operations_with_ids_and_counters(env: ToolWorldEnv) -> None:
    # Seed 0's training tasks have first numbers even, odd, odd; every iteration plays all three.
    replies = [
        json.dumps({"critique": "No tool call.", "operations": [
            {"op": "add", "text": "Call calculate for odd first numbers."}, {"op": "add", "text": "Be polite."}]}),
        json.dumps({"critique": "Even ones still guessed.", "operations": [
            {"op": "refine", "id": "p1", "text": USE_TOOL}, {"op": "remove", "id": "p2"},
            {"op": "add", "text": "Say the exact number."}], "helpful": ["p1"], "harmful": ["p2"]}),
    ]
    result = optimize(env, ScriptedChatModel(replies), playbook=True, iterations=3, minibatch=3)
    assert [c.id for c in result.candidates] == ["c0", "c1", "c2"]
    assert result.candidate("c1").playbook == (PlaybookItem("p1", "Call calculate for odd first numbers."),
                                               PlaybookItem("p2", "Be polite."))
    best = result.candidate(result.best)
    assert best.id == "c2" and best.prompt == seed_prompt(env)  # the base prompt is never rewritten
    assert best.playbook == (PlaybookItem("p1", USE_TOOL, helpful=1), PlaybookItem("p3", "Say the exact number."))
    assert [e["event"] for e in result.events if e["event"] in ("proposed", "skipped")] == [
        "proposed", "proposed", "skipped"]
    assert sum(result.heldout_after) == 3 and "[p3] Say the exact number." in best.system_text()


def test_playbook_operation_on_a_missing_item_is_rejected(env: ToolWorldEnv) -> None:
    bad = json.dumps({"critique": "x", "operations": [{"op": "refine", "id": "p7", "text": USE_TOOL}]})
    result = optimize(env, ScriptedChatModel([bad]), playbook=True, iterations=1)
    assert [e["reason"] for e in result.events if e["event"] == "rejected"] == [
        "operation 1 (refine): no playbook item 'p7' (items: none)"]
    assert [c.id for c in result.candidates] == ["c0"]


def test_same_seed_same_files_byte_for_byte(env: ToolWorldEnv, tmp_path: Path) -> None:
    outputs = []
    for run in ("a", "b"):
        result = optimize(env, ScriptedChatModel([edit("Answer quickly."), edit(USE_TOOL)]), iterations=2)
        paths = write_result(result, tmp_path / run)
        outputs.append({name: paths[name].read_bytes() for name in ("events.jsonl", "front.json", "report.md",
                                                                     "best_prompt.txt")})
    assert outputs[0] == outputs[1]
    other = optimize(env, ScriptedChatModel([edit("Answer quickly."), edit(USE_TOOL)]), iterations=2, seed=5)
    assert other.train != result.train  # the seed chooses the split


def test_a_recorded_run_replays_without_the_models(env: ToolWorldEnv, tmp_path: Path) -> None:
    cache = tmp_path / "calls.jsonl"
    recorded = optimize(env, CachedChatModel(ScriptedChatModel([edit(USE_TOOL)]), cache),
                        policy=CachedChatModel(ScriptedChatModel(reply_fn=act), cache), iterations=1)
    silent = ScriptedChatModel([])  # raises if called: replay must not reach it
    replayed = optimize(env, CachedChatModel(silent, cache, mode="replay"),
                        policy=CachedChatModel(silent, cache, mode="replay"), iterations=1)
    assert replayed.events == recorded.events and silent.calls == []
    with pytest.raises(CacheMissError):
        optimize(env, CachedChatModel(silent, cache, mode="replay"), policy=CachedChatModel(silent, cache, "replay"),
                 iterations=1, seed=9)


def test_cli_rejects_a_split_larger_than_the_environment(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["optimize", "calculator", "--train-tasks", "150", "--heldout-tasks", "60"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["envgym optimize: error: calculator: 150 training + 60 held-out tasks, but the environment has "
                   "only 200 tasks"]
