"""A mechanism task's request says what the person wants in plain words (synth.intents): no tool's name read out,
every value the user gives named so it can be asked for, and the graded answer asked for as a question."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envgym.loader import load_environment
from envgym.registry import env_dirs
from envgym.world.mechanisms import CATALOGUE
from envgym.world.spec import TaskSpec
from synth.intents import FLOW_ACTS, answer_phrase
from synth.lexicon import lexical, words


def _mechanism_tasks(root: Path) -> list[TaskSpec]:
    return [t for d in env_dirs(root) for t in load_environment(str(d)).tasks if "mechanism" in t.meta["kind"]]


def _user_keys_of_mechanism_calls(task: TaskSpec) -> set[str]:
    """The facts the program passes to a mechanism's tools (not the sign-in facts or the record's description)."""
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("src") == "user":
                found.add(str(node["key"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for step in task.meta["program"]["steps"]:
        if str(task.meta["tools"].get(step.get("tool", ""), "")).startswith("mechanism:"):
            walk(step.get("args", {}))
    return found


def test_every_flow_of_the_catalogue_has_a_plain_request() -> None:
    flows = {(name, flow) for name, m in CATALOGUE.items() for flow in m.flows}
    assert flows == set(FLOW_ACTS)


def test_no_request_reads_out_a_tool_name_or_its_verb_and_object(small_suite: Path) -> None:
    """Neither a called tool's name in words ("get visit version") nor its verb with its object ("delete run",
    from `delete_run`; "list attachments", from `list_run_attachments`)."""
    tasks = _mechanism_tasks(small_suite)
    assert len(tasks) >= 10
    for task in tasks:
        request = " " + task.meta["request"].lower().replace(",", " ").replace(".", " ") + " "
        for tool in task.meta["tools"]:
            parts = words(tool).split()
            for copied in {" ".join(parts), f"{parts[0]} {parts[-1]}"}:
                assert f" {copied} " not in request, (copied, task.meta["request"])


def test_every_value_a_mechanism_call_takes_from_the_user_is_named_in_the_request(small_suite: Path) -> None:
    named = 0
    for task in _mechanism_tasks(small_suite):
        names = task.meta.get("fact_names") or {}
        for key in _user_keys_of_mechanism_calls(task):
            assert (names.get(key) or words(key)) in task.meta["request"], (key, task.meta["request"])
            assert task.user_known[key] not in task.meta["request"]
            named += 1
    assert named >= 3


def test_the_answer_is_asked_for_as_a_question_in_the_request_and_the_instruction(small_suite: Path) -> None:
    for task in _mechanism_tasks(small_suite):
        field = task.meta["program"]["steps"][-1]["values"][-1]["path"][-1]
        assert lexical(field) in answer_phrase(field)
        assert answer_phrase(field) in task.meta["request"] and answer_phrase(field) in task.instruction
        assert "the last step reports" not in task.meta["request"] + task.instruction


def test_no_flow_phrase_reads_out_its_tools_whatever_the_roles_are_called() -> None:
    """The same rule as above over every flow of the catalogue, with sample role names."""
    roles = {"record": "visit", "item": "room", "party": "guest", "items": "rooms"}
    for (mechanism, flow), act in FLOW_ACTS.items():
        text = " " + act.format(**roles, my="my", i="I", give="").lower().replace(",", " ") + " "
        for verb in flow:
            parts = words(verb.format(**roles)).split()
            for copied in {" ".join(parts), f"{parts[0]} {parts[-1]}"}:
                assert f" {copied} " not in text, (mechanism, copied)


def test_the_user_gives_a_value_it_wants_as_the_value_and_the_planner_reads_it(small_suite: Path) -> None:
    """"The new memo is front desk.", not "My new memo is front desk."; its email stays "My email is ..."."""
    from envgym.users import ScriptedUser
    from synth.planner import _fact

    seen = 0
    for task in _mechanism_tasks(small_suite):
        names = task.meta.get("fact_names") or {}
        for key in task.meta["wanted_facts"]:
            name = names.get(key) or words(key)
            reply = ScriptedUser(task).respond(f"What is the {name}?", lambda: False).text
            assert reply.startswith(f"The {name} is "), reply
            assert _fact(f"My email is a@b.c. {reply}", key) == task.user_known[key]
            seen += 1
        own = [k for k in task.user_known if k not in task.meta["wanted_facts"]]
        reply = ScriptedUser(task).respond(f"What is your {names.get(own[0]) or words(own[0])}?", lambda: False)
        assert reply.text.startswith("My "), reply.text
    assert seen >= 3
