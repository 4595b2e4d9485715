"""Loading an environment folder (world.yaml, tasks.jsonl, policy.md, optional tools.py) once per process."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

from envgym.rewards.answers import check_task_answers
from envgym.world.errors import UnknownTaskError
from envgym.world.files import load_tasks, load_world
from envgym.world.live import check_live_tools, live_folder_tools
from envgym.world.replay import Plant, TargetCache
from envgym.world.spec import SpecError, TaskSpec, WorldSpec
from envgym.world.state import WorldState, generate_state
from envgym.world.tools import ToolExecutor


@dataclass
class EnvironmentData:
    """Everything an environment needs, loaded and validated: world, tasks, initial state, tool executor."""

    world: WorldSpec
    tasks: list[TaskSpec]
    directory: Path | None
    initial: WorldState
    executor: ToolExecutor
    targets: TargetCache = field(init=False)

    def __post_init__(self) -> None:
        check_live_tools(self.world, self.executor.implementations())
        self.targets = TargetCache(self.executor, self.initial)

    @property
    def name(self) -> str:
        return self.world.name

    def task(self, task_id: str) -> TaskSpec:
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise UnknownTaskError(f"environment {self.name!r} has no task {task_id!r} (it has {len(self.tasks)} tasks)")

    def target_state(self, task: TaskSpec, attack: str | None = None, plant: Plant | None = None) -> WorldState:
        """The state the reference solution reaches from the initial world (with `attack` planted); shared, so
        callers must not change it."""
        return self.targets.state(task, attack, plant)

    def target_hash(self, task: TaskSpec, attack: str | None = None, plant: Plant | None = None) -> str:
        """Hash of the reference solution's end state, computed once per (task, attack)."""
        return self.targets.hash(task, attack, plant)


def _with_policy(world: WorldSpec, directory: Path | None) -> WorldSpec:
    if world.policy == "" and directory is not None and (directory / "policy.md").exists():
        return world.model_copy(update={"policy": (directory / "policy.md").read_text()})
    return world


def build_environment(
    world: WorldSpec, tasks: list[TaskSpec], directory: Path | None = None
) -> EnvironmentData:
    """Assemble an environment from models (e.g. built in code or by the synthesizer)."""
    for task in tasks:  # a bad answer fails here, naming the task, rather than at the end of an episode
        try:
            check_task_answers(task.id, task.answers)
        except ValueError as exc:
            raise SpecError(f"{directory or world.name}: {exc}") from exc
    world = _with_policy(world, directory)
    extra = None
    if directory is not None and "live" in (world.meta.get("mcp") or {}):
        # A live MCP world (`envgym synth run --mcp-server CMD --live`): a fresh server per episode, on the folder's
        # state, from the provider the synthesizer registers as a plugin.
        extra = live_folder_tools(world, Path(directory))
    return EnvironmentData(world, tasks, directory, generate_state(world), ToolExecutor(world, directory, extra))


def read_environment(directory: str | Path) -> tuple[WorldSpec, list[TaskSpec]]:
    """Read and validate a folder's world (with its policy.md) and tasks without running any of its code.

    This is all `envgym list` and `envgym show` need, so browsing a folder never imports its tools.py.
    """
    path = Path(directory)
    world_file = next(
        (path / n for n in ("world.yaml", "world.yml", "world.json") if (path / n).exists()), None
    )
    if world_file is None:
        raise SpecError(f"{path}: no world.yaml in this environment folder")
    world = load_world(world_file)
    tasks_file = path / "tasks.jsonl"
    tasks = load_tasks(tasks_file) if tasks_file.exists() else []
    return _with_policy(world, path), tasks


@functools.lru_cache(maxsize=64)
def load_environment(directory: str | Path) -> EnvironmentData:
    """Load and validate an environment folder; errors name the file and what is wrong.

    This imports the folder's Python modules (tools, hooks): a folder is code, like a Python package.
    """
    path = Path(directory)
    world, tasks = read_environment(path)
    return build_environment(world, tasks, path)
