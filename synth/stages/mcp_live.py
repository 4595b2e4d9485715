"""Stage 2c, live MCP worlds: worlds whose tools are the real server, one fresh server per episode on its own state.

`run_mcp_live(servers, out, ...)` explores each server (`synth.mcp_explore`): the state its own write tools seeded
becomes the world's initial state (`<env>/state/`), walks over its tools become multi-call tasks whose answers
are the server's own results, each replayed on a fresh server (the sim-vs-live control), then verified like every
synthetic task (oracle and fair planner 1.0, negative controls 0). Grading reads the server's state folder through
a digest that leaves out the `exclude` globs. Every tool left out is reported with its reason: every call failed,
its writes leave no trace in the state folder (state in the server's memory), its results differ between fresh
servers, or no kept task uses it.
"""

from __future__ import annotations

import random
import shutil
import statistics
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.loader import EnvironmentData
from envgym.world.files import dump_tasks, dump_world
from envgym.world.spec import Answer, PolicyRules, TaskSpec, ToolCall, ToolSpec, WorldSpec
from envgym.world.state import generate_state
from envgym.world.tools import ToolExecutor
from synth.mcp_explore import Explorer, Walk, program_of, request_of, seed_calls, writes_by_name
from synth.mcp_harvest import HarvestError, harvest, names_state, server_argv
from synth.mcp_live import EpisodeMCPTools
from synth.program import shape
from synth.seeds import content_id, item_seed
from synth.stages.mcp import env_name
from synth.stages.tasks import GREETINGS
from synth.stages.verify import rejected_by, verify_tasks

LIVE_STATE = "state"


@dataclass
class LiveServer:
    """One server to build a live world from: its command, environment (`{state}` allowed in both), the globs its
    state digest leaves out, an optional folder its state starts from before seeding, and the read calls whose
    results join the state digest (`synth.mcp_live.EpisodeMCPTools` probes)."""

    command: str
    env: dict[str, str] = field(default_factory=dict)
    exclude: list[str] = field(default_factory=list)
    template: str | None = None
    probes: list[ToolCall] = field(default_factory=list)


def live_world(name: str, server: str, specs: Sequence[ToolSpec], writes: set[str], live: dict[str, Any],
               seed: int, max_steps: int) -> WorldSpec:
    """The world of a live server's usable tools: the harvested specs, read-only where no call changed the state."""
    tools = [s.model_copy(update={"labels": sorted({*s.labels, "read_only"} - ({"read_only"} if s.name in writes
                                                                              else set()))})
             for s in specs]
    names = ", ".join(sorted(writes)) or "none here"
    policy = "\n".join([
        f"- Before each change ({names}), say what you will do and get an explicit yes.",
        "- Make no change the user did not ask for; one change per confirmation.",
        "- Use only values you were given or that a tool returned; answer with the exact value, once."])
    return WorldSpec(
        name=name, description=f"[mcp-live] The tools of the MCP server {server}, run live: one fresh server per "
        "episode over its own copy of the state.", seed=seed, tools=tools, policy=policy, max_steps=max_steps,
        system_prompt=f"You are an assistant with the tools of {server}. Use only the tools below and follow the "
                      "policy.",
        rules=PolicyRules(confirm_writes=True, no_unrequested_writes=True), meta={"mcp": {"server": server,
                                                                                      "live": live}})


def _task(walk: Walk, writes: set[str], server: str, rng: random.Random) -> TaskSpec:
    program = program_of(walk, writes)
    ask = request_of(walk)
    calls = seed_calls(walk.steps)
    answers = [] if walk.answer_path is None else [Answer(
        value=str(walk.answer), type="number" if isinstance(walk.answer, int | float) else "text")]
    wrote = [c for c in calls if c.name in writes]
    rubric = ["The agent got an explicit yes before each change and made no other change."] if wrote else []
    if answers:
        rubric.append(f"The agent stated exactly {answers[0].value}.")
    ops = {s.tool: "mcp-live" for s in walk.steps}
    body = {"program": program.model_dump(mode="json"), "ask": ask}
    return TaskSpec(
        id=f"mcp_live_{content_id(body, 12)}", instruction=f"You want this done: {ask}",
        opening=f"{rng.choice(GREETINGS)}, {ask}", solution=calls,
        final_reply=f"It is {walk.answer}." if answers else "Done.", answers=answers, rubric=rubric,
        max_steps=4 * len(calls) + 8,
        tags=["mcp-live", "write" if wrote else "read", "mcp"],
        meta={"kind": "mcp-live", "shape": shape(program, ops), "source": "mcp", "server": server,
              "program": program.model_dump(mode="json", exclude_defaults=True), "tools": ops, "constraints": [],
              "paraphrased": False, "results": [s.result for s in walk.steps],
              "literals": sorted({str(v) for c in calls for v in c.arguments.values()})})


def _classify(explorer: Explorer, specs: Sequence[ToolSpec]) -> tuple[list[str], set[str], dict[str, str]]:
    """(usable tools, the ones that write, tool -> why it is left out)."""
    usable: list[str] = []
    writes: set[str] = set()
    left_out: dict[str, str] = {}
    for spec in specs:
        record = explorer.records[spec.name]
        if record.ok == 0:
            left_out[spec.name] = f"every call failed ({record.failed}): {record.last_error or 'no answer'}"
        elif record.wrote:
            usable.append(spec.name)
            writes.add(spec.name)
        elif writes_by_name(spec):
            left_out[spec.name] = (f"writes (by its name or hints), yet none of its {record.ok} calls that worked "
                                   "changed the state folder: what it changes lives in the server's memory, where "
                                   "grading cannot see it, or these calls changed nothing")
        else:
            usable.append(spec.name)
    return usable, writes, left_out


def explore_server(server: LiveServer, folder: Path, seed: int, tasks_per_env: int, timeout_s: float = 60.0,
                   pool: int = 1) -> tuple[WorldSpec | None, list[TaskSpec], dict[str, Any], EpisodeMCPTools | None]:
    """Seed, walk and replay one server; the world (None if refused), its candidate tasks, a report, its tools."""
    argv = server_argv(server.command)
    template = Path(tempfile.mkdtemp(prefix="envgym-live-template-"))
    try:
        if server.template:
            shutil.copytree(server.template, template, dirs_exist_ok=True)
        specs = harvest([argv], timeout_s=timeout_s, env=server.env, state_template=template)
        name = str((specs[0].source or {}).get("server_name", argv[0])) if specs else argv[0]
        report: dict[str, Any] = {"server": name, "command": " ".join(argv), "tools_total": len(specs),
                                  "tools_not_used": {}, "refused": None}
        in_cwd = not names_state(argv, server.env)
        seeding = EpisodeMCPTools(specs, template, server.env, timeout_s, server.exclude, state_in_cwd=in_cwd,
                                  probes=server.probes)
        explorer = Explorer(seeding, item_seed(seed, "mcp-live", name, 0))
        if folder.exists():
            shutil.rmtree(folder)
        if server.template:  # a template is the initial state as given: seeding writes would undo its setup
            shutil.copytree(template, folder / LIVE_STATE)
        else:
            explorer.seed_state(folder / LIVE_STATE)
    finally:
        shutil.rmtree(template, ignore_errors=True)
    episodes = EpisodeMCPTools(specs, folder / LIVE_STATE, server.env, timeout_s, server.exclude,
                               state_in_cwd=in_cwd, pool=pool, probes=server.probes)
    explorer.episodes = episodes
    explorer.survey()
    usable, writes, left_out = _classify(explorer, specs)
    report["tools_not_used"] = left_out
    if not usable:
        report["refused"] = "no tool of this server can be graded: " + "; ".join(f"{k}: {v}" for k, v in
                                                                                  left_out.items())
        episodes.close()
        return None, [], report, None
    rng = random.Random(item_seed(seed, "mcp-live-walks", name, 0))
    tasks: dict[str, TaskSpec] = {}
    unstable = explorer.unstable
    for _ in range(tasks_per_env * 4):
        if len(tasks) >= tasks_per_env:
            break
        steps = explorer.walk(usable, rng.choice([2, 2, 3]))
        if steps is None:
            continue
        wrote = any(s.tool in writes for s in steps)
        if wrote and explorer.final_digest == episodes.initial_digest:
            continue  # a write task must change the state, or doing nothing would pass it
        path, value = explorer.answer(steps)
        if path is None and not wrote:
            continue
        if not explorer.replays(steps):
            for s in steps:
                unstable[s.tool] = unstable.get(s.tool, 0) + 1
            continue
        task = _task(Walk(steps, path, value), writes, name, rng)
        if task.id not in tasks:
            tasks[task.id] = task
            for s in steps:
                explorer.used[s.tool] = explorer.used.get(s.tool, 0) + 1
    live = {"command": argv, "env": server.env, "exclude": server.exclude, "state": LIVE_STATE,
            "state_in_cwd": in_cwd, "probes": [p.model_dump(mode="json") for p in server.probes]}
    world = live_world(env_name(name) + "_live", name, [s for s in specs if s.name in usable], writes, live,
                       item_seed(seed, "mcp-live-world", name, 0), 40)
    report["replay_mismatches"] = unstable
    return world, list(tasks.values()), report, episodes


def live_data(world: WorldSpec, tasks: list[TaskSpec], episodes: EpisodeMCPTools, folder: Path | None = None
              ) -> EnvironmentData:
    """An env over the live server: its tools run on a fresh server per episode (`episodes`)."""
    executor = ToolExecutor(world, folder, extra=episodes.functions())
    return EnvironmentData(world, tasks, folder, generate_state(world), executor)


def _readme(world: WorldSpec, report: dict[str, Any], kept: int) -> str:
    used = "\n".join(f"- `{t}`" for t in report["tools_used"]) or "- none"
    unused = "\n".join(f"- `{t}`: {why}" for t, why in report["tools_not_used"].items()) or "- none"
    return (f"# {world.name}\n\nThe MCP server `{report['server']}` (`{report['command']}`), run live by `envgym "
            f"synth run --mcp-server CMD --live`: each episode starts a fresh server over a copy of `state/`.\n\n"
            f"## Tools used by the tasks\n{used}\n\n## Not used\n{unused}\n\n{kept} tasks, each replayed on a fresh "
            "server with the same results, the oracle and a fair planner 1.0, the negative controls 0.\n")


def run_mcp_live(servers: Sequence[LiveServer], out: str | Path, seed: int = 1, tasks_per_env: int = 8,
                 max_steps: int = 40, advance: Callable[[str, int], None] | None = None,
                 timeout_s: float = 60.0, pool: int = 1) -> dict[str, Any]:
    """Build, verify and write one live world per server; return a per-server report (tools used and left out with
    reasons, tasks, calls per task, server start cost)."""
    out = Path(out)
    summary: dict[str, Any] = {}
    for server in servers:
        try:
            scratch = out / "_synth" / "mcp_live" / str(content_id(server.command, 8))
            world, tasks, report, episodes = explore_server(server, scratch, seed, tasks_per_env, timeout_s, pool)
        except HarvestError as exc:
            summary[server.command] = {"refused": str(exc)}
            if advance:
                advance("mcp live worlds", len(servers))
            continue
        kept: list[TaskSpec] = []
        if world is not None and episodes is not None and tasks:
            data = live_data(world, tasks, episodes, scratch)
            scores = verify_tasks(data, seed)
            writes = {t.name for t in world.tools if not t.read_only}
            why: dict[str, list[str]] = {}
            for task in tasks:
                # Controls that play exactly the oracle measure nothing (as for simulated MCP worlds): skip-auth
                # always (no accounts), every-write where the task's solution already calls every write tool.
                same = {"skip-auth"} | ({"every-write"} if writes <= {c.name for c in task.solution} else set())
                why[task.id] = rejected_by({k: v for k, v in scores[task.id].items() if k not in same})
            report["rejected"] = {k: v for k, v in why.items() if v}
            kept = [t for t in tasks if not why[t.id]]
        used = sorted({c.name for t in kept for c in t.solution})
        report["tools_used"] = used
        for name in (world.tools if world is not None else []):
            if name.name not in used and name.name not in report["tools_not_used"]:
                report["tools_not_used"][name.name] = "no kept task uses it"
        report["tasks_kept"] = len(kept)
        report["tasks_sampled"] = len(tasks)
        report["calls_per_task"] = sorted(len(t.solution) for t in kept)
        if episodes is not None:
            episodes.close()
            report["server_start_s"] = {**_percentiles(episodes.start_times), "pool": pool}
        if world is not None and kept:
            folder = out / world.name
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            shutil.copytree(scratch / LIVE_STATE, folder / LIVE_STATE)
            dump_world(world.model_copy(update={"policy": ""}), folder / "world.yaml")
            (folder / "policy.md").write_text(world.policy + "\n")
            dump_tasks(kept, folder / "tasks.jsonl")
            (folder / "README.md").write_text(_readme(world, report, len(kept)))
            report["env"] = world.name
        summary[report["server"]] = report
        if advance:
            advance("mcp live worlds", len(servers))
    return summary


def _percentiles(times: Sequence[float]) -> dict[str, float]:
    if not times:
        return {}
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(ordered), "p50": round(statistics.median(ordered), 3), "p95": round(p95, 3)}
