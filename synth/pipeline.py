"""`envgym synth run`: the offline pipeline from taxonomy to verified environment folders.

Stages (each a module, each writing `<out>/_synth/<stage>.jsonl`): domains -> tools (synthesized and validated
on fixtures) -> agents -> tasks (sampled, replayed, verified). Then every agent becomes an environment folder
`<out>/<env>/` (world.yaml, tasks.jsonl, policy.md, README.md) that `envgym.register_dir(out)` registers. Every
item's seed comes from the seed tree, so the same config gives byte-identical files, and a killed run resumes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.llm import ChatModel
from envgym.loader import build_environment
from envgym.world.spec import TaskSpec, ToolSpec, WorldSpec, dump_tasks, dump_world
from envgym.world.state import generate_state
from envgym.world.tools import ToolExecutor
from synth.agents import make_agent
from synth.domains import select_domains
from synth.seeds import canonical_json, item_rng
from synth.store import StageStore
from synth.tasks import feasible_kinds, make_task
from synth.taxonomy import DomainBlueprint, builtin_taxonomy
from synth.toolcheck import validate_tools
from synth.toolgen import synthesize_tools
from synth.verify import verify_tasks
from synth.worlds import domain_entities

SYNTH_DIR = "_synth"


class SynthConfig(BaseModel):
    """The settings of one synthesis run (stored in `_synth/config.json`; a resume must match them)."""

    model_config = ConfigDict(extra="forbid")

    seed: int = 1
    domains: int = Field(20, ge=1)
    agents_per_domain: int = Field(1, ge=1, le=8)
    tasks_per_env: int = Field(24, ge=1)
    max_steps: int = Field(20, ge=4)
    llm: str | None = Field(None, description="Model spec used to propose/paraphrase; None is fully procedural.")


@contextmanager
def _progress(enabled: bool) -> Iterator[Progress]:
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, disable=not enabled, transient=False) as bar:
        yield bar


def _world_for(domain: dict[str, Any], tools: dict[str, ToolSpec], agent: dict[str, Any], env_name: str,
               max_steps: int) -> WorldSpec:
    bp = DomainBlueprint.model_validate(domain["blueprint"])
    entities = domain_entities(bp, item_rng(domain["seed"], "worlds", domain["name"]))
    return WorldSpec(
        name=env_name, description=f"[{domain['category']}] {bp.description}", seed=domain["seed"],
        entities=entities, tools=[tools[r] for r in agent["roles"]], policy=agent["policy"],
        system_prompt=agent["system_prompt"], max_steps=max_steps,
        meta={"synth": {"category": domain["category"], "domain": domain["name"], "parent": domain["parent"],
                        "roles": {r: tools[r].name for r in agent["roles"]}, "persona": agent["persona"],
                        "blueprint": domain["blueprint"]}},
    )


def _domain_tools(domain: dict[str, Any]) -> tuple[DomainBlueprint, dict[str, ToolSpec]]:
    bp = DomainBlueprint.model_validate(domain["blueprint"])
    return bp, synthesize_tools(bp)


def stage_tools(domain: dict[str, Any]) -> list[dict[str, Any]]:
    """Synthesize a domain's tools and validate each by execution on its seeded world."""
    bp, tools = _domain_tools(domain)
    entities = domain_entities(bp, item_rng(domain["seed"], "worlds", domain["name"]))
    world = WorldSpec(name=domain["name"], seed=domain["seed"], entities=entities, tools=list(tools.values()))
    checks = validate_tools(world, generate_state(world))
    return [{"domain": domain["name"], "role": role, "spec": tool.model_dump(mode="json", exclude_defaults=True),
             "checks": checks[tool.name], "valid": all(checks[tool.name].values())}
            for role, tool in tools.items()]


def stage_agents(domain: dict[str, Any], valid: dict[str, ToolSpec], count: int, seed: int) -> list[dict[str, Any]]:
    bp = DomainBlueprint.model_validate(domain["blueprint"])
    entities = domain_entities(bp, item_rng(domain["seed"], "worlds", domain["name"]))
    agents = []
    for i in range(count):
        agent = make_agent(bp, valid, entities, item_rng(seed, "agents", domain["name"], i))
        env = domain["name"] if count == 1 else f"{domain['name']}_a{i}"
        agents.append({"domain": domain["name"], "env": env, "index": i, **agent})
    return agents


def stage_tasks(domain: dict[str, Any], tools: dict[str, ToolSpec], agent: dict[str, Any], config: SynthConfig,
                model: ChatModel | None) -> list[dict[str, Any]]:
    """Sample up to `tasks_per_env` distinct tasks for one agent and keep the verified ones."""
    world = _world_for(domain, tools, agent, agent["env"], config.max_steps)
    bp = DomainBlueprint.model_validate(domain["blueprint"])
    initial = generate_state(world)
    executor = ToolExecutor(world)
    roles = {r: tools[r].name for r in agent["roles"]}
    kinds = feasible_kinds(agent["roles"])
    tasks: list[TaskSpec] = []
    seen: set[str] = set()
    for attempt in range(config.tasks_per_env * 4):
        if len(tasks) >= config.tasks_per_env or not kinds:
            break
        rng = item_rng(config.seed, "tasks", agent["env"], attempt)
        task = make_task(world, roles, bp, initial, kinds[attempt % len(kinds)], rng, executor, model)
        if task is None:
            continue
        key = canonical_json([c.model_dump(mode="json") for c in task.solution])
        if key in seen or task.id in {t.id for t in tasks}:
            continue
        seen.add(key)
        tasks.append(task)
    verdicts = verify_tasks(build_environment(world, tasks))
    return [{"env": agent["env"], "task": t.model_dump(mode="json"), "oracle": verdicts[t.id].oracle_reward,
             "do_nothing": verdicts[t.id].do_nothing_reward, "target_hash": verdicts[t.id].target_hash,
             "order": i} for i, t in enumerate(tasks) if verdicts[t.id].keep]


def _readme(world: WorldSpec, tasks: list[TaskSpec]) -> str:
    meta = world.meta["synth"]
    goals = "\n".join(f"- {g}" for g in meta["blueprint"]["goals"])
    tools = "\n".join(f"- `{t.name}`{' (read-only)' if t.read_only else ''}: {t.description}" for t in world.tools)
    return (f"# {world.name}\n\nSynthesized by `envgym synth` (category `{meta['category']}`, domain "
            f"`{meta['domain']}`).\n\n{world.description}\n\n## Typical user goals\n{goals}\n\n## Tools\n{tools}\n\n"
            f"{len(tasks)} tasks, each verified: its reference solution replays, the oracle policy scores 1.0 and "
            "the do-nothing policy fails.\n")


def materialize(out: Path, domains: list[dict[str, Any]], tools: dict[str, dict[str, ToolSpec]],
                agents: list[dict[str, Any]], tasks: list[dict[str, Any]], max_steps: int) -> list[str]:
    """Write one environment folder per agent that has tasks; returns the environment names."""
    by_domain = {d["name"]: d for d in domains}
    names = []
    for agent in sorted(agents, key=lambda a: a["env"]):
        mine = sorted((t for t in tasks if t["env"] == agent["env"]), key=lambda t: t["order"])
        if not mine:
            continue
        world = _world_for(by_domain[agent["domain"]], tools[agent["domain"]], agent, agent["env"], max_steps)
        folder = out / agent["env"]
        folder.mkdir(parents=True, exist_ok=True)
        specs = [TaskSpec.model_validate(t["task"]) for t in mine]
        dump_world(world.model_copy(update={"policy": ""}), folder / "world.yaml")
        (folder / "policy.md").write_text(world.policy + "\n")
        dump_tasks(specs, folder / "tasks.jsonl")
        (folder / "README.md").write_text(_readme(world, specs))
        names.append(agent["env"])
    return names


def _check_config(folder: Path, config: SynthConfig) -> None:
    path = folder / "config.json"
    text = canonical_json(config.model_dump(mode="json")) + "\n"
    if path.exists() and path.read_text() != text:
        raise ValueError(f"{path}: this folder holds a run with other settings ({path.read_text().strip()}); "
                         f"use another --out or the same settings")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_pipeline(config: SynthConfig, out: str | Path, model: ChatModel | None = None,
                 progress: bool = True) -> dict[str, Any]:
    """Run (or resume) every stage and write the environment folders; returns a summary."""
    out = Path(out)
    stages = out / SYNTH_DIR
    _check_config(stages, config)
    with _progress(progress) as bar:
        job = bar.add_task("domains", total=1)
        domains = StageStore(stages, "domains").run(
            [("taxonomy", partial(select_domains, builtin_taxonomy(), config.domains, config.seed, model))],
            lambda: bar.advance(job))
        domains.sort(key=lambda d: d["order"])
        job = bar.add_task("tools", total=len(domains))
        tool_records = StageStore(stages, "tools").run(
            [(d["name"], partial(stage_tools, d)) for d in domains], lambda: bar.advance(job))
        valid: dict[str, dict[str, ToolSpec]] = {d["name"]: {} for d in domains}
        for rec in sorted(tool_records, key=lambda r: (r["domain"], r["role"])):
            if rec["valid"]:
                valid[rec["domain"]][rec["role"]] = ToolSpec.model_validate(rec["spec"])
        # Role order is the template order, so every later stage sees tools in the same order.
        order = list(_domain_tools(domains[0])[1])
        valid = {d: dict(sorted(t.items(), key=lambda kv: order.index(kv[0]))) for d, t in valid.items()}
        job = bar.add_task("agents", total=len(domains))
        agents = StageStore(stages, "agents").run(
            [(d["name"], partial(stage_agents, d, valid[d["name"]], config.agents_per_domain, config.seed))
             for d in domains], lambda: bar.advance(job))
        by_domain = {d["name"]: d for d in domains}
        agents.sort(key=lambda a: a["env"])
        job = bar.add_task("tasks (sample, replay, verify)", total=len(agents))
        tasks = StageStore(stages, "tasks").run(
            [(a["env"], partial(stage_tasks, by_domain[a["domain"]], valid[a["domain"]], a, config, model))
             for a in agents], lambda: bar.advance(job))
        envs = materialize(out, domains, valid, agents, tasks, config.max_steps)
    summary = {"domains": len(domains), "categories": len({d["category"] for d in domains}),
               "tools": sum(len(t) for t in valid.values()), "tools_rejected": sum(not r["valid"] for r in tool_records),
               "agents": len(agents), "environments": len(envs), "tasks": len(tasks)}
    (stages / "summary.json").write_text(json.dumps(summary, sort_keys=True, indent=1) + "\n")
    return {"out": str(out), **summary}
