"""Single stages: tool validation catches broken tools, difficulty, rollouts/export, LLM record/replay, stats CLI."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.llm import CachedChatModel, CacheMissError, ScriptedChatModel
from envgym.loader import load_environment
from envgym.registry import env_dirs
from envgym.world.spec import Effect, WorldSpec
from envgym.world.state import generate_state
from synth.difficulty import append_constraint, curriculum
from synth.rollouts import export_sft, rollout
from synth.taxonomy import builtin_taxonomy
from synth.toolcheck import validate_tools
from synth.toolgen import synthesize_tools
from synth.worlds import domain_entities


def _domain_world() -> WorldSpec:
    bp = builtin_taxonomy().categories["smart_home"].domains[0]
    tools = synthesize_tools(bp)
    return WorldSpec(name="check", entities=domain_entities(bp, random.Random(0)), tools=list(tools.values()))


def test_taxonomy_has_at_least_16_categories() -> None:
    assert len(builtin_taxonomy().categories) >= 16


def test_validation_flags_a_read_only_tool_that_writes() -> None:
    world = _domain_world()
    broken = []
    for tool in world.tools:
        if tool.name == "get_device_details":
            # Labelled read-only but actually updates a record.
            effect = Effect(op="update", entity="devices", key_arg="device_id", set={"label": "tampered"})
            tool = tool.model_copy(update={"effect": effect, "labels": ["read_only"]})
        broken.append(tool)
    world = world.model_copy(update={"tools": broken})
    checks = validate_tools(world, generate_state(world))
    assert checks["get_device_details"]["read_keeps_state"] is False
    assert all(all(c.values()) for name, c in checks.items() if name != "get_device_details")


def test_validation_flags_a_precondition_that_never_fires() -> None:
    world = _domain_world()
    tools = []
    for tool in world.tools:
        if tool.name == "cancel_schedule":
            assert tool.effect is not None
            effect = tool.effect.model_copy(update={"preconditions": []})
            tool = tool.model_copy(update={"effect": effect})
        tools.append(tool)
    world = world.model_copy(update={"tools": tools})
    checks = validate_tools(world, generate_state(world))
    assert "precondition_fires" not in checks["cancel_schedule"]
    assert checks["update_schedule_duration_min"]["precondition_fires"] is True


def test_appended_constraint_changes_the_target_and_keeps_earlier_ones(small_suite: Path) -> None:
    data = load_environment(str(env_dirs(small_suite)[0].resolve()))
    pairs = [(t, h) for t in data.tasks if (h := append_constraint(data, t, seed=0)) is not None]
    assert pairs, "no task of the env could take a constraint"
    task, harder = pairs[0]
    assert data.target_state(harder).hash() != data.target_state(task).hash()
    assert harder.instruction.startswith(task.instruction) and len(harder.meta["constraints"]) == 1
    hardest = append_constraint(data, harder, seed=0)
    if hardest is not None:
        assert hardest.meta["constraints"][0] == harder.meta["constraints"][0]


def test_rollouts_with_failures_feed_curriculum_and_sft_export(small_suite: Path, tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    from trl.data_utils import is_conversational

    rollouts = tmp_path / "rollouts.jsonl"
    records = rollout(small_suite, rollouts, policy="oracle", n=3, seed=0, failure_rate=0.3, progress=False)
    assert len(records) == 3 * sum(len(load_environment(str(d.resolve())).tasks) for d in env_dirs(small_suite))
    assert len(rollout(small_suite, rollouts, policy="oracle", n=3, failure_rate=0.3, progress=False)) == len(records)
    rewards = [r["reward"] for r in records]
    assert 0 < sum(rewards) < len(rewards), "controlled failures should fail some oracle rollouts"
    counts = curriculum(small_suite, rollouts, tmp_path / "curriculum", band=0.2)
    assert counts["selected"] > 0 and counts["hardened"] > 0
    summary = export_sft(rollouts, tmp_path / "sft.jsonl")
    assert 0 < summary["examples"] <= summary["passed"] < summary["trajectories"]
    data = datasets.load_dataset("json", data_files=str(tmp_path / "sft.jsonl"), split="train")
    assert len(data) == summary["examples"]
    row = data[0]
    assert is_conversational(row) and row["messages"][-1]["role"] == "assistant"
    assert isinstance(json.loads(row["tools"]), list)


def test_llm_paraphrases_replay_offline_byte_for_byte(tmp_path: Path) -> None:
    from synth.pipeline import SynthConfig, run_pipeline

    def reply(messages: list[dict[str, str]], tools: object) -> str:
        text = messages[-1]["content"]
        return "Hello there. " + text.split("Message: ", 1)[1] if "Message: " in text else "A domain for tests."

    config = SynthConfig(seed=5, domains=1, tasks_per_env=4, llm="scripted")
    cache = tmp_path / "cache.jsonl"
    recorded = CachedChatModel(ScriptedChatModel(reply_fn=reply), cache, mode="record")
    run_pipeline(config, tmp_path / "rec", recorded, progress=False)
    tasks = (next(p for p in (tmp_path / "rec").iterdir() if p.name != "_synth") / "tasks.jsonl").read_text()
    assert '"paraphrased": true' in tasks and "Hello there." in tasks

    def unreachable(messages: object, tools: object) -> str:
        raise AssertionError("replay called the model")

    replayed = CachedChatModel(ScriptedChatModel(reply_fn=unreachable), cache, mode="replay")
    run_pipeline(config, tmp_path / "rep", replayed, progress=False)
    again = (next(p for p in (tmp_path / "rep").iterdir() if p.name != "_synth") / "tasks.jsonl").read_text()
    assert again == tasks
    with pytest.raises(CacheMissError):
        run_pipeline(config.model_copy(update={"seed": 6}), tmp_path / "miss", replayed, progress=False)


def test_stats_cli_prints_one_json_object(small_suite: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "stats", str(small_suite), "--json"],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    stats = json.loads(out.stdout)
    assert stats["environments"] == 3 and stats["tasks"] > 0
    assert sum(stats["tool_calls_per_task"].values()) == stats["tasks"]
