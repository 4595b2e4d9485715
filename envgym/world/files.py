"""Reading and writing world.yaml and tasks.jsonl: errors name the file, the line and the field; output is byte-stable."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from envgym.world.inputs import INPUT_LIMITS, check_value, read_bounded
from envgym.world.spec import SpecError, TaskSpec, WorldSpec


def _format_validation_error(path: Path | str, err: ValidationError, prefix: str = "") -> str:
    lines = [f"{path}: invalid {err.title}"]
    for e in err.errors():
        where = prefix + ".".join(str(p) for p in e["loc"]) or "<root>"
        lines.append(f"  at {where}: {e['msg']}")
    return "\n".join(lines)


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without aliases: a few KB of nested aliases (a "billion laughs") expand to billions of nodes, which
    then hang every copy and hash of the world. A world file gains nothing from them that plain YAML lacks.
    Nodes and nesting are counted as they are composed (`envgym.world.inputs`): a 3M-item flow list is refused
    after 30k values, not parsed for 40 s, and deep nesting stops before the interpreter's recursion limit."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"YAML alias *{event.anchor} at line {event.start_mark.line + 1}: aliases are not allowed in world "
                f"files (write the value out)"
            )
        self._nodes += 1
        if self._nodes > INPUT_LIMITS.max_nodes or self._depth >= INPUT_LIMITS.max_depth:
            line = self.peek_event().start_mark.line + 1
            what = f"more than {INPUT_LIMITS.max_nodes} values" if self._depth < INPUT_LIMITS.max_depth else (
                f"nested deeper than {INPUT_LIMITS.max_depth} levels")
            raise yaml.YAMLError(f"line {line}: {what}")
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class _NoAliasDumper(yaml.SafeDumper):
    """Writes a value shared in memory out in full each time, so the file loads with `_NoAliasLoader`."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def load_world(path: str | Path) -> WorldSpec:
    """Load a world from a YAML or JSON file; a bad file raises SpecError naming the file, the path and the problem."""
    path = Path(path)
    text = read_bounded(path, INPUT_LIMITS.max_world_bytes)
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=_NoAliasLoader)
    except RecursionError:
        raise SpecError(f"{path}: cannot read world file: nested deeper than {INPUT_LIMITS.max_depth} levels") from None
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: JSON syntax, or an integer of over 4,300 digits
        raise SpecError(f"{path}: cannot read world file: {str(exc)[:300]}") from None
    check_value(data, str(path))
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        world = WorldSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError(_format_validation_error(path, exc)) from exc
    records = sum(entity.count for entity in world.entities.values())
    if records > INPUT_LIMITS.max_records:
        raise SpecError(
            f"{path}: the entities' counts add up to {records} records; at most {INPUT_LIMITS.max_records} are "
            "generated"
        )
    return world


def load_tasks(path: str | Path) -> list[TaskSpec]:
    """Load tasks from JSONL (one TaskSpec per line); errors name the file and line."""
    path = Path(path)
    tasks: list[TaskSpec] = []
    first_line: dict[str, int] = {}  # task id -> the line it first appeared on; one pass, not a count per id
    duplicates: list[str] = []
    lines = read_bounded(path).splitlines()
    if len(lines) > INPUT_LIMITS.max_lines:
        raise SpecError(f"{path}: {len(lines)} lines; a task file holds at most {INPUT_LIMITS.max_lines} tasks")
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            task = TaskSpec.model_validate_json(line)
        except ValidationError as exc:
            raise SpecError(_format_validation_error(f"{path}:{lineno}", exc)) from exc
        seen = first_line.setdefault(task.id, lineno)
        if seen != lineno:
            duplicates.append(f"{task.id!r} on lines {seen} and {lineno}")
        tasks.append(task)
    if duplicates:
        raise SpecError(f"{path}: duplicate task ids: {'; '.join(duplicates[:5])}")
    return tasks


def dump_tasks(tasks: Iterable[TaskSpec], path: str | Path) -> None:
    """Write tasks as canonical JSONL (sorted keys, no defaults dropped), byte-stable for the same tasks."""
    lines = [json.dumps(t.model_dump(mode="json"), sort_keys=True, ensure_ascii=False) for t in tasks]
    Path(path).write_text("\n".join(lines) + "\n")


def dump_world(world: WorldSpec, path: str | Path) -> None:
    """Write a world as YAML, omitting fields left at their defaults, byte-stable for the same world."""
    data = world.model_dump(mode="json", exclude_defaults=True)
    text = yaml.dump(data, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True, width=100)
    Path(path).write_text(text)


def format_json_schema() -> dict[str, Any]:
    """JSON Schema of the world and task formats (what `envgym schema` prints)."""
    return {
        "world": WorldSpec.model_json_schema(),
        "task": TaskSpec.model_json_schema(),
    }
