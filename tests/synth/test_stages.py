"""Single stages: grammar, tool operators and checks, rules and controls, fair rollouts and export, difficulty,
LLM record/replay, stats."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.env import ToolWorldEnv
from envgym.llm import CachedChatModel, CacheMissError, ScriptedChatModel
from envgym.loader import build_environment, load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.registry import env_dirs
from envgym.world.spec import Effect, ToolFaults, ToolSpec, WorldSpec
from envgym.world.state import generate_state
from synth.difficulty import append_constraint, curriculum
from synth.lexicon import a, past, plural
from synth.phrasing import mask
from synth.planner import FairPlanner
from synth.program import Program
from synth.rollouts import export_sft, rollout, unseen_values
from synth.stages.domains import OPERATORS, select_domains
from synth.stages.toolcheck import validate_tools
from synth.stages.tools import stage_tools, tool_world
from synth.stats import curve_marks, near_duplicate_rate
from synth.taxonomy import builtin_taxonomy

BAD_ARTICLE = re.compile(r"\ba ([aeiou]\w*)", re.IGNORECASE)


def test_taxonomy_has_at_least_16_categories() -> None:
    assert len(builtin_taxonomy().categories) >= 16


def test_articles_plurals_and_participles_read_right() -> None:
    assert [a("order"), a("user"), a("hour"), a("booking")] == ["an order", "a user", "an hour", "a booking"]
    assert [plural("watering_plan"), plural("address"), plural("delivery"), plural("day")] == \
        ["watering_plans", "addresses", "deliveries", "days"]
    assert [past("ship"), past("approve"), past("check_in")] == ["shipped", "approved", "checked in"]


def test_three_hundred_domains_evolve_by_structural_operators() -> None:
    domains = select_domains(builtin_taxonomy(), 300, 1)
    assert len({d.name for d in domains}) == 300
    assert all(2 <= len(d.entities) <= 6 for d in domains)
    children = [d for d in domains if d.parent]
    assert children and all(d.operators for d in children)
    assert set(OPERATORS) <= {op for d in children for op in d.operators}
    by_name = {d.name: d for d in domains}
    structural = [d for d in children if d.entities != by_name[d.parent or ""].entities or d.limits]
    assert len(structural) >= 0.8 * len(children), "children must differ from their parent in structure"
    assert select_domains(builtin_taxonomy(), 40, 1) == domains[:40]


def test_generated_text_has_no_article_before_a_vowel(small_suite: Path) -> None:
    texts = []
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder.resolve()))
        texts += [t.description for t in data.world.tools] + [data.world.policy, data.world.system_prompt]
        texts += [x for t in data.tasks for x in (t.instruction, t.opening, t.final_reply)]
    bad = [m.group(0) for text in texts for m in BAD_ARTICLE.finditer(text)
           if not m.group(1).lower().startswith(("u", "one", "eu"))]
    assert not bad, bad[:5]
    assert not any("enroll_in a" in t or "  " in t for t in texts)


def test_tool_operators_and_mutations_are_all_exercised_over_forty_domains() -> None:
    records = [r for d in select_domains(builtin_taxonomy(), 40, 2) for r in stage_tools(d, 2)]
    operators = {r.operator for r in records}
    assert {"authenticate", "get", "join", "search", "create", "update", "transition", "bulk_transition",
            "aggregate_count", "aggregate_sum", "aggregate_min", "aggregate_max"} <= operators
    assert {"optional_filter", "nested_args", "required_field", "permission", "rate_limit", "transient"} <= {
        m for r in records for m in r.mutations}
    faulty = [r for r in records if {"rate_limit", "transient"} & set(r.mutations)]
    assert all(r.checks["faults_fire"] for r in faulty if r.valid)
    assert sum(r.valid for r in records) / len(records) > 0.95


def _domain_world() -> WorldSpec:
    domain = select_domains(builtin_taxonomy(), 1, 1)[0]
    return tool_world(domain, [ToolSpec.model_validate(r.spec) for r in stage_tools(domain, 1) if r.valid])


def test_validation_flags_a_read_only_tool_that_writes() -> None:
    world = _domain_world()
    get = next(t for t in world.tools if t.name.startswith("get_") and t.effect and t.effect.key_arg)
    assert get.effect is not None
    broken = Effect(op="update", entity=get.effect.entity, key_arg=get.effect.key_arg, set={"status": "tampered"})
    tools = [t.model_copy(update={"effect": broken, "labels": ["read_only"]}) if t.name == get.name else t
             for t in world.tools]
    checks = validate_tools(world.model_copy(update={"tools": tools}), generate_state(world))
    assert not all(checks[get.name].values())
    assert all(all(c.values()) for name, c in checks.items() if name != get.name)


def test_validation_flags_a_state_machine_guard_that_never_fires() -> None:
    world = _domain_world()
    guarded = next(t for t in world.tools if t.effect and t.effect.op == "update" and t.effect.preconditions)
    assert guarded.effect is not None
    loose = guarded.effect.model_copy(update={"preconditions": []})
    tools = [t.model_copy(update={"effect": loose}) if t.name == guarded.name else t for t in world.tools]
    checks = validate_tools(world.model_copy(update={"tools": tools}), generate_state(world))
    assert "precondition_fires" not in checks[guarded.name]
    assert checks[guarded.name]["valid_call_succeeds"]


def test_worlds_declare_policy_rules_and_tasks_typed_answers(small_suite: Path) -> None:
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder.resolve()))
        rules = data.world.rules
        assert rules is not None and rules.confirm_writes and rules.no_unrequested_writes
        assert rules.authenticate_with and rules.requires_auth
        assert all(t.solution[0].name in rules.authenticate_with for t in data.tasks)
        answered = [t for t in data.tasks if t.answers]
        assert answered and all(a.type in ("number", "money", "id", "enum", "date", "time", "text")
                                for t in answered for a in t.answers)
        assert all(a.choices for t in answered for a in t.answers if a.type == "enum")


def test_fair_rollouts_with_failures_export_sft_without_unseen_values(small_suite: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from trl.data_utils import is_conversational

    path = tmp_path / "rollouts.jsonl"
    records = rollout(small_suite, path, n=2, seed=0, failure_rate=0.3)
    assert len(records) == 2 * sum(len(load_environment(str(d.resolve())).tasks) for d in env_dirs(small_suite))
    assert len(rollout(small_suite, path, n=2, failure_rate=0.3)) == len(records)
    retried = [r for r in records if "transient" in r["tool_errors"]]
    assert retried and sum(r["reward"] == 1.0 for r in retried) >= 0.8 * len(retried)
    summary = export_sft(path, tmp_path / "sft.jsonl")
    assert summary["examples"] > 0 and summary["unseen_value_trajectories"] == 0
    rows = [json.loads(x) for x in (tmp_path / "sft.jsonl").read_text().splitlines()]
    assert all(unseen_values(r["messages"]) == [] for r in rows)
    data = datasets.load_dataset("json", data_files=str(tmp_path / "sft.jsonl"), split="train")
    assert len(data) == summary["examples"] and is_conversational(data[0])


def test_the_checker_flags_a_call_that_uses_a_hidden_value(small_suite: Path, tmp_path: Path) -> None:
    records = rollout(small_suite, tmp_path / "oracle.jsonl", policy="oracle", n=1)
    flagged = [r for r in records if unseen_values(r["messages"])]
    assert flagged, "the hidden-solution replay uses the user's email before the user gave it"


def test_appended_constraint_extends_the_program_and_stays_verified(small_suite: Path, tmp_path: Path) -> None:
    data = load_environment(str(env_dirs(small_suite)[0].resolve()))
    pairs = [(t, h) for t in data.tasks if (h := append_constraint(data, t, seed=0)) is not None]
    assert pairs, "no task of the env could take a constraint"
    task, harder = pairs[0]
    assert data.target_state(harder).hash() != data.target_state(task).hash()
    assert harder.instruction.startswith(task.instruction) and len(harder.meta["constraints"]) == 1
    records = rollout(small_suite, tmp_path / "r.jsonl", n=2)
    counts = curriculum(small_suite, tmp_path / "r.jsonl", tmp_path / "curriculum", band=0.2)
    assert counts["hardened"] > 0 and len(records) > 0


def test_llm_paraphrases_and_tool_summaries_replay_offline_byte_for_byte(tmp_path: Path) -> None:
    from synth.pipeline import SynthConfig, run_pipeline

    asked: list[str] = []

    def reply(messages: list[dict[str, str]], tools: object) -> str:
        prompt = messages[-1]["content"]
        if prompt.startswith("Write the Python function name"):
            return ""  # names are tests/synth/test_tool_names.py's; here every tool keeps its procedural one
        if "Sentence: " not in prompt:
            return "Hello there. " + prompt.split("Message: ", 1)[1]
        # Tool summaries: every other one breaks the format (two lines, first person), the rest are fine.
        asked.append(prompt)
        label = prompt.split("keep the words '", 1)[1].split("'", 1)[0]
        return f"Works with {label} records, as asked." if len(asked) % 2 else f"I will handle {label}s.\nDone."

    config = SynthConfig(seed=5, domains=1, tasks_per_env=4, llm="scripted")
    cache = tmp_path / "cache.jsonl"
    run_pipeline(config, tmp_path / "rec", model=CachedChatModel(ScriptedChatModel(reply_fn=reply), cache,
                                                                 mode="record"))
    tasks = (next(p for p in (tmp_path / "rec").iterdir() if p.name != "_synth") / "tasks.jsonl").read_text()
    assert '"paraphrased": true' in tasks and "Hello there." in tasks
    procedural = run_pipeline(config.model_copy(update={"llm": None}), tmp_path / "proc")
    assert procedural["tools"] > 0
    plain = {r["spec"]["name"]: r["spec"]["description"] for r in
             map(json.loads, (tmp_path / "proc" / "_synth" / "tools.jsonl").read_text().splitlines())}
    worded = {r["spec"]["name"]: r["spec"]["description"] for r in
              map(json.loads, (tmp_path / "rec" / "_synth" / "tools.jsonl").read_text().splitlines())}
    changed = [n for n in plain if worded[n] != plain[n]]
    assert len(asked) > 2 and len(changed) == (len(asked) + 1) // 2
    for name in changed:
        # The model's sentence replaces the first one only: what the tool returns or refuses is kept verbatim.
        assert worded[name].startswith("Works with ") and worded[name].endswith(plain[name].partition(". ")[2])

    def unreachable(messages: object, tools: object) -> str:
        raise AssertionError("replay called the model")

    replayed = CachedChatModel(ScriptedChatModel(reply_fn=unreachable), cache, mode="replay")
    run_pipeline(config, tmp_path / "rep", model=replayed)
    again = (next(p for p in (tmp_path / "rep").iterdir() if p.name != "_synth") / "tasks.jsonl").read_text()
    assert again == tasks
    with pytest.raises(CacheMissError):
        run_pipeline(config.model_copy(update={"seed": 6}), tmp_path / "miss", model=replayed)


def test_the_signature_curve_is_sampled_every_two_hundred_domains() -> None:
    assert curve_marks(2000) == [10, 20, 50, 100, *range(200, 2001, 200)]
    assert curve_marks(30) == [10, 20, 30]


def test_near_duplicates_are_counted_after_masking_names_and_numbers() -> None:
    assert mask("You are Ada Okafor. Change OR0012 to 5 on 2025-03-04.") == \
        "<name> are <name>. <name> <id> to <num> on <date>."
    assert near_duplicate_rate(["You are Ada. Set 5.", "You are Bo. Set 7.", "Cancel it."]) == round(1 / 3, 4)


def test_stats_cli_prints_diversity_and_rejections(small_suite: Path, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "stats", str(small_suite), "--json",
                          "--report", str(tmp_path)],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    stats = json.loads(out.stdout)
    assert stats["signature_curve"]["3"] == stats["distinct_tool_signatures"]
    assert "| 3 | " in (tmp_path / "synth_stats.md").read_text()
    assert (tmp_path / "signature_curve.png").read_bytes().startswith(b"\x89PNG")
    assert stats["environments"] == 3 and stats["tasks"] > 0
    assert stats["distinct_tool_signatures"] > 10 and stats["task_program_shapes"] > 5
    assert sum(stats["tool_calls_per_task"].values()) == stats["tasks"]
    assert stats["tasks_rejected_by"]["sampled"] >= stats["tasks"]
    assert stats["tool_names"] is None  # no model named the tools
    assert 0 <= stats["instruction_near_duplicate_rate"] < 1


def test_oracle_and_fair_planner_retry_every_failure_mode_and_still_score_one(small_suite: Path) -> None:
    errors: list[str] = []
    for folder in env_dirs(small_suite):
        data = load_environment(str(folder.resolve()))
        faults = ToolFaults(transient=0.3, rate_limit=1)
        world = data.world.model_copy(update={"tools": [t.model_copy(update={"faults": faults})
                                                        for t in data.world.tools]})
        faulty = build_environment(world, data.tasks)
        env = ToolWorldEnv(data=faulty, guard=False, tool_rewards=False)
        for task in faulty.tasks:
            for policy in (OraclePolicy(faulty), FairPlanner(Program.model_validate(task.meta["program"]))):
                trajectory = run_episode(env, policy, seed=0, options={"task_id": task.id})
                assert trajectory.reward == 1.0, (task.id, type(policy).__name__, trajectory.reward_components)
                errors += trajectory.tool_errors
    assert {"transient", "rate_limited"} <= set(errors)
