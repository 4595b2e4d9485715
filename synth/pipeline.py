"""`envgym synth run`: orchestration only. Stages (synth.stages) each write `<out>/_synth/<stage>.jsonl`:
domains -> tools (derived, mutated, executed and checked) -> tasks (composed, solved, verified against the negative
controls). Then `synth.materialize` writes one environment folder per domain with kept tasks. Every item's seed
comes from the seed tree, so the same config gives byte-identical files, and a killed run resumes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envgym.llm import ChatModel
from envgym.loader import build_environment
from envgym.world.spec import TaskSpec, ToolSpec
from synth.materialize import write_env
from synth.model import DomainModel, TaskRecord, ToolRecord
from synth.seeds import canonical_json
from synth.stages.domains import select_domains
from synth.stages.naming import name_counts
from synth.stages.tasks import MECHANISM_SHARE, paraphrased, stage_tasks
from synth.stages.tools import described, stage_tools
from synth.stages.verify import rejected_by, verify_tasks
from synth.stages.worlds import domain_world
from synth.store import StageStore, in_order
from synth.taxonomy import builtin_taxonomy

SYNTH_DIR = "_synth"
Advance = Callable[[str, int], None]


class SynthConfig(BaseModel):
    """The settings of one synthesis run (stored in `_synth/config.json`; a resume must match them)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 1
    domains: int = Field(20, ge=1)
    tasks_per_env: int = Field(24, ge=1)
    max_steps: int = Field(40, ge=4)
    llm: str | None = Field(None, description="Model spec that names tools, rewords their summaries and rewords task "
                                              "openings; None is fully procedural.")
    mechanism_share: float = Field(MECHANISM_SHARE, ge=0.0, le=1.0,
                                   description="Share of tasks that run a mechanism's flow (the rest: lookups, "
                                               "aggregates, changes, branches)")


def index_tools(tools: list[ToolRecord]) -> dict[str, list[tuple[ToolSpec, str, str]]]:
    """operator -> [(spec, entity, operator)] over a domain's valid tools, in tool order."""
    out: dict[str, list[tuple[ToolSpec, str, str]]] = {}
    for t in tools:
        out.setdefault(t.operator, []).append((ToolSpec.model_validate(t.spec), t.entity, t.operator))
    return out


def unit_tools(domain: DomainModel, seed: int, model: ChatModel | None = None) -> list[dict[str, Any]]:
    """Derive, mutate and check one domain's tools; with a model, they carry its names where those pass the name
    filter, and the valid ones get its reworded summaries."""
    tools = stage_tools(domain, seed, model)
    if model is not None:
        names = [t.spec["name"] for t in tools]
        tools = [described(model, t, domain.entity(t.entity).label, [n for n in names if n != t.spec["name"]])
                 if t.valid else t for t in tools]
    # exclude_none: without a model a record has no `naming`, and its line stays as it was before names existed.
    return [t.model_dump(mode="json", exclude_none=True) for t in tools]


def unit_tasks(domain: DomainModel, tools: list[ToolRecord], config: SynthConfig,
               model: ChatModel | None = None) -> list[dict[str, Any]]:
    """Sample, solve and verify one domain's tasks; every sampled task is recorded, kept or not."""
    world = domain_world(domain, tools, config.max_steps)
    data = build_environment(world, [])
    tasks, _ = stage_tasks(domain, index_tools(tools), data.initial, data.executor, config.tasks_per_env,
                           config.seed, domain.name, config.mechanism_share)
    if model is not None:
        tasks = [paraphrased(model, t) for t in tasks]
    if not tasks:
        return []
    data = build_environment(world, tasks)
    scores = verify_tasks(data, config.seed)
    records = []
    for i, task in enumerate(tasks):
        why = rejected_by(scores[task.id])
        records.append(TaskRecord(env=domain.name, task=task.model_dump(mode="json"), shape=task.meta["shape"],
                                  scores=scores[task.id], keep=not why, rejected_by=why, order=i))
    return [r.model_dump(mode="json") for r in records]


class RunMismatchError(ValueError):
    """The output folder holds a run made with other settings: resuming it would mix two runs."""


def _check_config(folder: Path, config: SynthConfig) -> None:
    path = folder / "config.json"
    text = canonical_json(config.model_dump(mode="json")) + "\n"
    if path.exists() and path.read_text() != text:
        raise RunMismatchError(f"{path}: this folder holds a run with other settings ({path.read_text().strip()}); "
                         f"use another --out or the same settings")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def summarize(domains: list[DomainModel], tools: list[ToolRecord], tasks: list[TaskRecord], envs: int) -> dict[
        str, Any]:
    rejected: Counter[str] = Counter(r for t in tasks for r in t.rejected_by)
    kept = [t for t in tasks if t.keep]
    return {"domains": len(domains), "categories": len({d.category for d in domains}),
            "tools": sum(t.valid for t in tools), "tools_rejected": sum(not t.valid for t in tools),
            "distinct_tool_signatures": len({t.signature for t in tools if t.valid}), "environments": envs,
            "tasks_sampled": len(tasks), "tasks": len(kept), "task_shapes": len({t.shape for t in kept}),
            "tasks_rejected_by": dict(sorted(rejected.items())), **({"tool_names": names} if (names := name_counts(tools)) else {})}


def run_pipeline(config: SynthConfig, out: str | Path, advance: Advance | None = None,
                 model: ChatModel | None = None, workers: int = 1) -> dict[str, Any]:
    """Run (or resume) every stage and write the environment folders; returns a summary. `advance(stage, total)`
    is called once per finished unit (the CLI draws progress with it); `model` paraphrases openings (through its
    record/replay cache); `workers` processes run the tools and tasks stages (same files for any number)."""
    workers = 1 if model is not None else workers
    out = Path(out)
    stages = out / SYNTH_DIR
    _check_config(stages, config)

    def tick(stage: str, total: int) -> Callable[[], None]:
        return lambda: advance(stage, total) if advance else None

    domain_rows = StageStore(stages, "domains").run(
        [("taxonomy", lambda: [d.model_dump(mode="json") for d in select_domains(builtin_taxonomy(), config.domains,
                                                                                  config.seed)])], tick("domains", 1))
    domains = sorted((DomainModel.model_validate({k: v for k, v in r.items() if k not in ("id", "unit")})
                      for r in domain_rows), key=lambda d: d.order)
    tool_rows = StageStore(stages, "tools").run(
        [(d.name, partial(unit_tools, d, config.seed, model)) for d in domains], tick("tools", len(domains)),
        workers)
    tools = [ToolRecord.model_validate({k: v for k, v in r.items() if k not in ("id", "unit")}) for r in tool_rows]
    by_domain: dict[str, list[ToolRecord]] = {d.name: [] for d in domains}
    for t in sorted(tools, key=lambda t: (t.domain, t.order)):
        if t.valid:
            by_domain[t.domain].append(t)
    task_rows = StageStore(stages, "tasks").run(
        [(d.name, partial(unit_tasks, d, by_domain[d.name], config, model)) for d in domains],
        tick("tasks", len(domains)), workers)
    tasks = [TaskRecord.model_validate({k: v for k, v in r.items() if k not in ("id", "unit")}) for r in task_rows]
    kept: dict[str, list[TaskRecord]] = {}
    for record in sorted(tasks, key=lambda r: (r.env, r.order)):
        if record.keep:
            kept.setdefault(record.env, []).append(record)
    writes = [partial(write_env, out, d, by_domain[d.name], [TaskSpec.model_validate(t.task) for t in kept[d.name]],
                      config.max_steps) for d in domains if d.name in kept]
    for _ in in_order(writes, workers):
        if advance:
            advance("environments", len(writes))
    summary = summarize(domains, tools, tasks, len(kept))
    (stages / "summary.json").write_text(json.dumps(summary, sort_keys=True, indent=1) + "\n")
    return {"out": str(out), **summary}
