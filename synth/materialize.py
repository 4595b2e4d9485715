"""Materialization: a domain's verified tools and tasks become an environment folder in the standard shape
(world.yaml, tasks.jsonl, policy.md, README.md) that `envgym.register_dir` registers. Nothing here decides what
is kept; the pipeline passes only verified records."""

from __future__ import annotations

from pathlib import Path

from envgym.world.files import dump_tasks, dump_world
from envgym.world.inputs import refuse_code
from envgym.world.spec import TaskSpec, WorldSpec
from synth.model import DomainModel, ToolRecord
from synth.stages.worlds import domain_world


def _readme(world: WorldSpec, domain: DomainModel, tasks: list[TaskSpec]) -> str:
    tools = "\n".join(f"- `{t.name}`{' (read-only)' if t.read_only else ''}: {t.description}" for t in world.tools)
    lineage = " -> ".join([domain.root, *domain.operators]) if domain.operators else domain.root
    return (f"# {world.name}\n\nSynthesized by `envgym synth` (category `{domain.category}`, grown as {lineage}).\n\n"
            f"{world.description}\n\n## Tools\n{tools}\n\n{len(tasks)} tasks. Each one's reference solution replays, "
            "the oracle and a fair planner score 1.0, and do-nothing, random calls, a guess-sprayer, skipping "
            "authentication, skipping confirmation and calling every write tool all score 0.\n")


def write_env(out: Path, domain: DomainModel, tools: list[ToolRecord], tasks: list[TaskSpec], max_steps: int) -> None:
    """Write one environment folder."""
    world = domain_world(domain, tools, max_steps)
    refuse_code(world, f"synthesized world {domain.name}")
    folder = out / domain.name
    folder.mkdir(parents=True, exist_ok=True)
    dump_world(world.model_copy(update={"policy": ""}), folder / "world.yaml")
    (folder / "policy.md").write_text(world.policy + "\n")
    dump_tasks(tasks, folder / "tasks.jsonl")
    (folder / "README.md").write_text(_readme(world, domain, tasks))
