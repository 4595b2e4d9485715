"""Stage 2b, MCP-grounded worlds: each harvested server's tools mapped onto a data model (`synth.mcp_worlds`), tasks
sampled as programs over the mapped tools, solved on the world, and verified against the negative controls of
synthetic tasks (`synth.stages.verify`). A control that would play exactly the oracle measures nothing and is left
out: skip-auth always (an MCP world has no accounts), every-write where the world has no write tool outside the
task's solution.

`run_mcp(specs, out, config)` writes `<out>/_synth/mcp.jsonl` (one record per server: every tool mapped or not with
the reason, and every sampled task with its scores) and one environment folder per server with kept tasks.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from envgym.loader import EnvironmentData, build_environment
from envgym.world.files import dump_tasks, dump_world
from envgym.world.inputs import INPUT_LIMITS, loads_bounded, read_bounded, refuse_code
from envgym.world.spec import Answer, AnswerType, FieldSpec, TaskSpec, ToolSpec, WorldSpec
from synth.lexicon import words
from synth.mcp_worlds import ToolMapping, map_server, mcp_world
from synth.program import AnswerStep, CallStep, Expr, Program, shape
from synth.seeds import canonical_json, content_id, item_rng, item_seed
from synth.segments import Unfit
from synth.stages.tasks import GREETINGS, solve
from synth.stages.verify import rejected_by, verify_tasks
from synth.store import StageStore


def read_harvest(path: str | Path) -> list[ToolSpec]:
    """Tool specs from a harvest file (`envgym synth harvest-mcp --out`); errors name the file and line.

    A harvest file is data: its size, lines and nesting are bounded (`envgym.world.inputs`), and a spec naming
    Python code (`python: module:function`) is refused, since building its world would import that module."""
    specs = []
    lines = [line for line in read_bounded(Path(path)).split("\n") if line.strip()]
    if len(lines) > INPUT_LIMITS.max_lines:
        raise ValueError(f"{path}: {len(lines)} lines; a harvest file holds at most {INPUT_LIMITS.max_lines} tools")
    for i, line in enumerate(lines, start=1):
        try:
            record = loads_bounded(line, f"{path}: line {i}")
            spec = ToolSpec.model_validate(record["spec"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: line {i} is not a harvested tool spec: {exc}") from None
        if spec.python is not None:
            raise ValueError(f"{path}: line {i}: tool {spec.name!r} names Python code ({spec.python!r}); a harvested "
                             "tool is data and may not")
        specs.append(spec)
    if not specs:
        raise ValueError(f"{path}: no harvested tools")
    return specs


def by_server(specs: Sequence[ToolSpec]) -> dict[str, list[ToolSpec]]:
    """Harvested specs grouped by server name, in harvest order."""
    out: dict[str, list[ToolSpec]] = {}
    for spec in specs:
        out.setdefault(str((spec.source or {}).get("server_name", "mcp")), []).append(spec)
    return out


def env_name(server: str) -> str:
    """`mcp-git` -> `mcp_git`, `secure-filesystem-server` -> `mcp_secure_filesystem_server`."""
    slug = re.sub(r"[^a-z0-9]+", "_", server.lower()).strip("_") or "server"
    return slug if slug.startswith("mcp_") else f"mcp_{slug}"


def _answer(value: Any, spec: FieldSpec) -> tuple[AnswerType, list[str]]:
    choices = spec.choices or spec.faker_args.get("elements") or []
    if choices:
        return "enum", [str(c) for c in choices]
    if spec.type in ("integer", "number") or (isinstance(value, int | float) and not isinstance(value, bool)):
        return "number", []
    return "text", []


def _fresh(spec: FieldSpec, taken: set[str], rng: random.Random, entity: str) -> Any:
    """A value for a new record's field; for a key, one no record has."""
    choices = [c for c in (spec.choices or spec.faker_args.get("elements") or []) if str(c) not in taken]
    if choices:
        return rng.choice(choices)
    if spec.type == "integer":
        return rng.randint(1, 60)
    if spec.type == "number":
        return round(rng.uniform(1, 500), 2)
    if spec.choices or spec.faker_args.get("elements"):
        raise Unfit("every value of the key is taken")
    return f"/srv/{entity}/new-{rng.randint(100, 999)}"


def _program(world: WorldSpec, data: EnvironmentData, m: ToolMapping, rng: random.Random) -> tuple[
        Program, str, list[tuple[AnswerType, list[str]]]]:
    """A program over one mapped tool, the request's text and the answer kinds; Unfit when it does not fit."""
    assert m.entity is not None
    tool = world.tool(m.tool)
    assert tool is not None and tool.effect is not None
    table_name = tool.effect.entity
    entity = world.entities[table_name]
    rows = list(data.initial.tables[table_name].values())
    props = list(tool.parameters.get("properties", {}))
    noun = words(m.entity)
    lit = lambda v: Expr(src="lit", value=v)  # noqa: E731
    if m.op == "get":
        record = rng.choice(rows)
        fields = [f for f in record if f != entity.key and record[f] is not None]
        if not fields:
            raise Unfit(f"a {noun} has nothing to ask about")
        f = rng.choice(fields)
        steps = [CallStep(tool=m.tool, args={m.key or entity.key: lit(record[entity.key])}, save="record"),
                 AnswerStep(values=[Expr(src="var", key="record", path=[f])], template=f"The {words(f)} is {{0}}.")]
        return Program(steps=steps), f"what is the {words(f)} of the {noun} {record[entity.key]}?", [
            _answer(record[f], entity.fields[f])]
    if m.op in ("list", "search"):
        filters = [p for p in props if p in entity.fields]
        args: dict[str, Any] = {}
        ask = f"how many {words(table_name)} are there?"
        if tool.effect.op == "search" and tool.effect.query_arg is not None:
            # The query is a value a record holds (the tool's own search then finds it): an empty or invented one
            # finds nothing, and a required one left out fails every draw.
            record = rng.choice(rows)
            seen = sorted({str(v) for v in record.values() if isinstance(v, str) and v})
            if not seen:
                raise Unfit(f"a {noun} holds no text to search for")
            needle = rng.choice(seen)
            args = {tool.effect.query_arg: lit(needle)}
            ask = f"how many {words(table_name)} match {needle!r}?"
        elif filters:
            record = rng.choice(rows)
            a = rng.choice(filters)
            args = {a: lit(record[a])}
            ask = f"how many {words(table_name)} have the {words(a)} {record[a]}?"
        steps = [CallStep(tool=m.tool, args=args, save="rows"),
                 AnswerStep(values=[Expr(src="var", key="rows", reduce="count")], template="There are {0}.")]
        return Program(steps=steps), ask, [("number", [])]
    if m.op == "create":
        required = tool.parameters.get("required", [])
        values = {p: _fresh(entity.fields[p], {str(k) for k in data.initial.tables[table_name]} if p == entity.key
                            else set(), rng, table_name) for p in props if p in required and p in entity.fields}
        said = ", ".join(f"{words(p)} {v}" for p, v in values.items())
        steps = [CallStep(tool=m.tool, args={p: lit(v) for p, v in values.items()}, write=True),
                 AnswerStep(values=[], template=f"The {noun} is created.")]
        return Program(steps=steps), f"please create a {noun} with {said}.", []
    record = rng.choice(rows)
    key = {m.key or entity.key: lit(record[entity.key])}
    if m.op == "delete":
        steps = [CallStep(tool=m.tool, args=key, write=True), AnswerStep(values=[], template=f"The {noun} is gone.")]
        return Program(steps=steps), f"please delete the {noun} {record[entity.key]}.", []
    targets = [p for p in props if p in entity.fields and p != entity.key]
    f = rng.choice(targets)
    new = _fresh(entity.fields[f], {str(record.get(f))}, rng, table_name)
    steps = [CallStep(tool=m.tool, args={**key, f: lit(new)}, write=True),
             AnswerStep(values=[], template=f"The {noun} is updated.")]
    return Program(steps=steps), f"please set the {words(f)} of the {noun} {record[entity.key]} to {new}.", []


def sample_mcp_task(world: WorldSpec, data: EnvironmentData, m: ToolMapping, rng: random.Random) -> TaskSpec:
    """One task over one mapped tool, solved on the world (Unfit when the draw does not fit)."""
    program, ask, kinds = _program(world, data, m, rng)
    calls, reply = solve(program, data.executor, data.initial.copy(), {})
    answers = [Answer(value=str(v), type=t, choices=c) for v, (t, c) in zip(reply.values, kinds, strict=True)]
    ops = {m.tool: f"mcp-{m.op}"}
    body = {"program": program.model_dump(mode="json"), "ask": ask}
    writes = [c for c in calls if not data.executor.tools[c.name].read_only]
    rubric = ["The agent got an explicit yes before the change and made no other change."] if writes else []
    if answers:
        rubric.append(f"The agent stated exactly {', '.join(a.value for a in answers)}.")
    literals = sorted({str(v) for c in calls for v in c.arguments.values()})
    return TaskSpec(
        id=f"mcp_{m.op}_{content_id(body, 12)}", instruction=f"You want to know or do this: {ask}",
        opening=f"{rng.choice(GREETINGS)}, {ask}", solution=calls, final_reply=reply.text, answers=answers,
        rubric=rubric, max_steps=4 * len(calls) + 8, tags=[f"mcp-{m.op}", "write" if writes else "read", "mcp"],
        meta={"kind": f"mcp-{m.op}", "shape": shape(program, ops), "source": "mcp", "server": m.server,
              "program": program.model_dump(mode="json", exclude_defaults=True), "tools": ops,
              "constraints": [], "paraphrased": False, "literals": literals})


def unit_server(server: str, specs: list[ToolSpec], seed: int, tasks_per_env: int,
                max_steps: int) -> list[dict[str, Any]]:
    """One server: its mappings, its world (if any tool maps) and its tasks, verified."""
    name = env_name(server)
    mappings = map_server(specs)
    record: dict[str, Any] = {"server": server, "env": name, "mappings": [m.model_dump(mode="json") for m in mappings],
                              "tasks": []}
    mapped = [m for m in mappings if m.mapped]
    if not mapped:
        return [record]
    world = mcp_world(name, server, specs, mappings, item_seed(seed, "mcp-world", name, 0), max_steps)
    # The stage file stores the world as canonical JSON (sorted keys), and field order decides the seeded values:
    # solve the tasks on the world exactly as it is stored and written, or their answers are another world's.
    world = WorldSpec.model_validate(json.loads(canonical_json(world.model_dump(mode="json", exclude_defaults=True))))
    refuse_code(world, f"MCP world {name}")
    data = build_environment(world, [])
    tasks: dict[str, TaskSpec] = {}
    for i in range(tasks_per_env * 3):
        if len(tasks) >= tasks_per_env:
            break
        rng = item_rng(seed, "mcp-task", name, i)
        try:
            task = sample_mcp_task(world, data, mapped[i % len(mapped)], rng)
        except Unfit:
            continue
        tasks.setdefault(task.id, task)
    if not tasks:
        return [record]
    data = build_environment(world, list(tasks.values()))
    scores = verify_tasks(data, seed)
    writes = {t.name for t in world.tools if not t.read_only}
    for task in tasks.values():
        same_as_oracle = {"skip-auth"} | ({"every-write"} if writes <= {c.name for c in task.solution} else set())
        kept_scores = {k: v for k, v in scores[task.id].items() if k not in same_as_oracle}
        why = rejected_by(kept_scores)
        record["tasks"].append({"task": task.model_dump(mode="json"), "scores": kept_scores, "keep": not why,
                                "rejected_by": why})
    record["world"] = world.model_dump(mode="json", exclude_defaults=True)
    return [record]


def _readme(world: WorldSpec, server: str, mappings: list[ToolMapping], kept: int) -> str:
    mapped = "\n".join(f"- `{m.tool}`: {m.op} over {m.entity}{' (read-only)' if 'read_only' in m.labels else ''}"
                       for m in mappings if m.mapped)
    unmapped = "\n".join(f"- `{m.tool}`: {m.reason}" for m in mappings if not m.mapped) or "- none"
    return (f"# {world.name}\n\nThe tools of the MCP server `{server}`, harvested and simulated over a data model by "
            f"`envgym synth run --mcp`.\n\n## Mapped tools\n{mapped}\n\n## Not mapped\n{unmapped}\n\n{kept} tasks. "
            "Each one's reference solution replays, the oracle and a fair planner score 1.0, and do-nothing, random "
            "calls, a guess-sprayer, skipping confirmation and calling every write tool all score 0.\n")


def _check_sources(folder: Path, specs: Sequence[ToolSpec], seed: int, tasks_per_env: int, max_steps: int) -> None:
    """A resumed run must harvest the same tools with the same settings (the stage file holds their worlds)."""
    text = canonical_json({"tools": content_id([s.model_dump(mode="json") for s in specs]), "seed": seed,
                           "tasks_per_env": tasks_per_env, "max_steps": max_steps}) + "\n"
    path = folder / "mcp_config.json"
    if path.exists() and path.read_text() != text:
        raise ValueError(f"{path}: this folder holds MCP worlds from other tools or settings; use another --out")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def run_mcp(specs: Sequence[ToolSpec], out: str | Path, seed: int = 1, tasks_per_env: int = 24, max_steps: int = 40,
            advance: Callable[[str, int], None] | None = None) -> dict[str, Any]:
    """Map, synthesize and verify one world per harvested server; write the folders; return a per-server summary."""
    out = Path(out)
    groups = by_server(specs)
    _check_sources(out / "_synth", specs, seed, tasks_per_env, max_steps)
    rows = StageStore(out / "_synth", "mcp").run(
        [(server, partial(unit_server, server, group, seed, tasks_per_env, max_steps))
         for server, group in groups.items()],
        lambda: advance("mcp worlds", len(groups)) if advance else None)
    summary: dict[str, Any] = {}
    for row in rows:
        mappings = [ToolMapping.model_validate(m) for m in row["mappings"]]
        kept = [TaskSpec.model_validate(t["task"]) for t in row["tasks"] if t["keep"]]
        if kept and "world" in row:
            world = WorldSpec.model_validate(row["world"])
            refuse_code(world, f"MCP world {row['env']}")
            folder = out / row["env"]
            folder.mkdir(parents=True, exist_ok=True)
            dump_world(world.model_copy(update={"policy": ""}), folder / "world.yaml")
            (folder / "policy.md").write_text(world.policy + "\n")
            dump_tasks(kept, folder / "tasks.jsonl")
            (folder / "README.md").write_text(_readme(world, row["server"], mappings, len(kept)))
        summary[row["server"]] = {
            "env": row["env"] if kept else None,
            "tools_mapped": {m.tool: f"{m.op} {m.entity}" for m in mappings if m.mapped},
            "tools_not_mapped": {m.tool: m.reason for m in mappings if not m.mapped},
            "tasks_sampled": len(row["tasks"]), "tasks_verified": len(kept),
            "rejected_by": sorted({r for t in row["tasks"] for r in t["rejected_by"]})}
    return summary
