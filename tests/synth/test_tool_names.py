"""Model-named tools (issue 15, part 5): a proposed name is used only if it is a short snake_case identifier no other
tool holds, a verb of the tool's own kind first, then its own records; the names carry through every artefact of the
env, whose tasks still verify, and a recorded run replays offline."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from envgym.llm import CachedChatModel, ScriptedChatModel
from envgym.loader import load_environment
from envgym.registry import env_dirs
from envgym.world.spec import ToolSpec
from synth.mutations import mutate
from synth.operators import derive, unique_name
from synth.pipeline import SynthConfig, run_pipeline
from synth.quality import tool_name_problem
from synth.seeds import item_rng
from synth.stages.domains import select_domains
from synth.stages.naming import (
    WRITE_KINDS,
    entity_forms,
    naming_prompt,
    own_entities,
    own_verbs,
    proposed_name,
    target_status,
    tool_kind,
)
from synth.stages.tools import stage_tools
from synth.stages.verify import CONTROLS, verify_tasks
from synth.stats import collect_stats
from synth.taxonomy import builtin_taxonomy

FORMS = {"visit": "visit", "visits": "visit", "patient": "patient", "patients": "patient",
         "visit_note": "visit_note", "visit_notes": "visit_note"}
TAKEN = {"get_visit", "list_visits"}


@pytest.mark.parametrize(("name", "kind", "problem"), [
    ("fetch_visit", "read", None),
    ("count_visits_by_status", "read", None),
    ("book_visit", "create", None),
    ("reschedule_visit", "transition", None),
    ("mark_visit_done", "transition", None),
    ("mark_visit_rescheduled", "transition", "marks without the status it sets (done)"),
    ("mark_visit", "transition", "marks without the status it sets (done)"),
    ("", "read", "empty"),
    ("fetch_visit\nfetch_visits", "read", "several lines"),
    ("Fetch Visit", "read", "not a snake_case identifier"),
    ("fetchVisit", "read", "not a snake_case identifier"),
    ("fetch-visit", "read", "not a snake_case identifier"),
    ("fetch_visit_" + "x" * 60, "read", "longer than 64 characters"),
    ("reset", "read", "a reserved tool name (reset)"),
    ("send_message_to_user", "read", "a reserved tool name (send_message_to_user)"),
    ("get_visit", "read", "another tool's name (get_visit)"),
    ("cancel_visit", "read", "a read tool named like a transition (cancel)"),
    ("delete_visit", "read", "a read tool named like a delete (delete)"),
    ("get_visit_details", "create", "a create tool named like a read (get)"),
    ("change_visit_time", "transition", "a transition tool named like an update (change)"),
    ("approve_visit", "transition", "another transition's verb (approve)"),
    ("hello_visit", "read", "no read verb first"),
    ("fetch_records", "read", "does not name its records (visit)"),
    ("list_visits_of_patient", "read", "names another entity (patient)"),
    ("list_visit_notes", "read", "names another entity (visit_note)"),
])
def test_a_proposed_tool_name_must_keep_its_kind_its_records_and_be_free(name: str, kind: str,
                                                                         problem: str | None) -> None:
    status = "done" if kind == "transition" else ""
    assert tool_name_problem(name, kind, {"visit"}, FORMS, TAKEN, ("reschedule",), status) == problem


@pytest.mark.parametrize(("reply", "name"), [
    ("fetch_visit", "fetch_visit"),
    (" `fetch_visit`\n", "fetch_visit"),
    ("```python\ndef fetch_visit(visit_id):", "fetch_visit"),
    ("def fetchVisit(id):", "fetchVisit"),
    ("The function is:\n\n```python", "The function is:\n\n```python"),
])
def test_a_reply_proposes_the_name_a_def_line_defines_or_itself(reply: str, name: str) -> None:
    assert proposed_name(reply) == name


def test_every_procedural_name_passes_the_name_filter() -> None:
    # The filter's verbs and entity rules describe what the operators already do: a model name that reads like the
    # procedural ones passes, so rejections measure the model, not a vocabulary gap.
    checked = 0
    for domain in select_domains(builtin_taxonomy(), 12, 1):
        rng, taken, made = item_rng(1, "tools", domain.name), set(), []
        for tool in derive(domain, rng):
            tool = mutate(tool, domain, rng)
            tool.spec = tool.spec.model_copy(update={"name": unique_name(tool.spec.name, taken)})
            taken.add(tool.spec.name)
            made.append(tool)
        for m in made:
            assert tool_name_problem(m.spec.name, tool_kind(m), own_entities(domain, m), entity_forms(domain),
                                     taken - {m.spec.name}, own_verbs(domain, m), target_status(m)) is None, (domain.name, m.spec.name)
            checked += 1
    assert checked > 100


def _whole_word(name: str) -> re.Pattern[str]:
    return re.compile(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])")


def test_model_names_carry_through_the_env_which_still_verifies_and_bad_names_fall_back(tmp_path: Path) -> None:
    config = SynthConfig(seed=5, domains=1, tasks_per_env=4, llm="scripted")
    domain = select_domains(builtin_taxonomy(), 1, config.seed)[0]
    # Mechanism tools keep the catalogue's names (a model names only the procedural ones).
    procedural = [t for t in stage_tools(domain, config.seed) if not t.operator.startswith("mechanism:")]
    # The recorded "model": a name per naming prompt (like a model at temperature 0, a function of the prompt). The
    # first write tool gets a read verb, the first two read tools after authentication a taken name and a
    # non-identifier; every other tool a fresh name.
    reads = [i for i, t in enumerate(procedural) if ToolSpec.model_validate(t.spec).read_only]
    first_write = next(i for i in range(len(procedural)) if i not in reads)
    taken, garbled = reads[1:3]
    plan = {i: f"{t.spec['name']}_v2" for i, t in enumerate(procedural)}
    plan[first_write] = f"fetch_{procedural[first_write].entity}"
    plan[taken], plan[garbled] = procedural[-1].spec["name"], "Look Up Records"
    by_prompt = {naming_prompt(ToolSpec.model_validate(t.spec)): plan[i]
                 for i, t in enumerate(procedural)}
    assert len(by_prompt) == len(procedural)

    def reply(messages: list[dict[str, str]], tools: object) -> str:
        return by_prompt.get(messages[-1]["content"], "")  # "" for summaries and openings: they stay procedural

    cache = tmp_path / "cache.jsonl"
    summary = run_pipeline(config, tmp_path / "rec", model=CachedChatModel(ScriptedChatModel(reply_fn=reply), cache,
                                                                           mode="record"))
    n, kind = len(procedural), WRITE_KINDS[procedural[first_write].operator]
    assert summary["tool_names"] == {
        "proposed": n, "kept": n - 3, "renamed": n - 3, "rejected": 3,
        "rejected_by": dict(sorted({"another tool's name": 1, "not a snake_case identifier": 1,
                                    f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} tool named like a read": 1}.items()))}
    assert collect_stats(tmp_path / "rec")["tool_names"] == summary["tool_names"]
    records = [json.loads(line) for line in (tmp_path / "rec" / "_synth" / "tools.jsonl").read_text().splitlines()]
    final = {r["naming"]["procedural"]: r["spec"]["name"] for r in records if "naming" in r}
    for i, t in enumerate(procedural):
        expected = t.spec["name"] if i in (taken, garbled, first_write) else plan[i]
        assert final[t.spec["name"]] == expected

    folder = env_dirs(tmp_path / "rec")[0]
    data = load_environment(str(folder.resolve()))
    names = {t.name for t in data.world.tools if t.mechanism is None}
    assert names == {final[t.spec["name"]] for t in procedural if t.valid}
    assert data.world.rules is not None and set(data.world.rules.authenticate_with) <= names
    text = (folder / "world.yaml").read_text() + (folder / "tasks.jsonl").read_text()
    for old, new in final.items():
        if old != new:
            assert not _whole_word(old).search(text), f"{old} (renamed {new}) is still referred to"
    every = {t.name for t in data.world.tools}
    assert data.tasks and all(c.name in every for task in data.tasks for c in task.solution)
    assert any(c.name.endswith("_v2") for task in data.tasks for c in task.solution)
    for task_id, scores in verify_tasks(data, config.seed).items():
        assert scores["oracle"] == 1.0 and scores["fair"] == 1.0, (task_id, scores)
        assert all(scores[c] == 0.0 for c in CONTROLS if c in scores), (task_id, scores)

    def unreachable(messages: object, tools: object) -> str:
        raise AssertionError("replay called the model")

    run_pipeline(config, tmp_path / "rep", model=CachedChatModel(ScriptedChatModel(reply_fn=unreachable), cache,
                                                                 mode="replay"))
    assert (env_dirs(tmp_path / "rep")[0] / "world.yaml").read_text() == (folder / "world.yaml").read_text()
