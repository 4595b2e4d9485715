"""Bounds on file inputs that are data (world files, task files, MCP harvest files): size, item count, nesting
depth, integer size and record counts, each refused with a one-line SpecError naming the file and the bound.

Found by attack: a world with a 3M-item flow list, `count: 1e8` or 10^6 tasks took over 40 s to show or load, and
deep nesting, huge integers and a 100k-deep JSON harvest file ended in tracebacks (RecursionError, ValueError).
Every bound is far above what any bundled or synthesized environment uses (the largest world has ~2,300 YAML nodes).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envgym.world.spec import SpecError, WorldSpec


@dataclass(frozen=True)
class InputLimits:
    """What one data file may hold.

    Attributes:
        max_file_bytes: size of one task file or harvest file.
        max_world_bytes: size of one world file (the largest bundled one is 31 KB).
        max_nodes: values (scalars, lists, mappings) in one world file (the largest bundled one has ~2,300), or in
            one line of a task or harvest file.
        max_depth: nesting of lists and mappings.
        max_int: the largest integer magnitude (64-bit): bigger ones only ever come from an attack or a typo.
        max_records: records a world generates, all entities together (`count`).
        max_lines: tasks in a task file, tools in a harvest file.
    """

    max_file_bytes: int = 64 << 20
    max_world_bytes: int = 2 << 20
    max_nodes: int = 30_000
    max_depth: int = 64
    max_int: int = 2**63 - 1
    max_records: int = 200_000
    max_lines: int = 200_000


INPUT_LIMITS = InputLimits()


def read_bounded(path: Path, max_bytes: int = INPUT_LIMITS.max_file_bytes) -> str:
    """The text of `path`, refusing a file over `max_bytes` without reading all of it."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read: {exc.strerror}") from exc
    if len(data) > max_bytes:
        raise SpecError(f"{path}: larger than the {max_bytes} byte limit for this kind of file")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise SpecError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def loads_bounded(text: str, where: str, limits: InputLimits = INPUT_LIMITS) -> Any:
    """`json.loads(text)`, checked with `check_value`; nesting past the interpreter's recursion, malformed JSON and
    integers too long to convert are SpecErrors too."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise SpecError(f"{where}: nested deeper than {limits.max_depth} levels") from None
    except ValueError as exc:  # JSONDecodeError, and int() of more than 4,300 digits
        raise SpecError(f"{where}: not valid JSON: {str(exc)[:200]}") from None
    check_value(value, where, limits)
    return value


def check_value(value: Any, where: str, limits: InputLimits = INPUT_LIMITS) -> None:
    """Refuse a parsed value with more than `max_nodes` values, deeper than `max_depth`, or an integer past `max_int`.

    Iterative, so a deep value cannot exhaust the interpreter's stack here."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    nodes = 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_nodes:
            raise SpecError(f"{where}: more than {limits.max_nodes} values")
        if depth > limits.max_depth:
            raise SpecError(f"{where}: nested deeper than {limits.max_depth} levels")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
            stack.extend((k, depth + 1) for k in item)
        elif isinstance(item, list | tuple):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) > limits.max_int:
            raise SpecError(f"{where}: an integer of {item.bit_length()} bits; at most {limits.max_int} is accepted")


def refuse_code(world: WorldSpec, where: str) -> None:
    """Refuse a world that names Python code: harvested and synthesized worlds are data only, so a `python:` tool
    in one can only have come from its input (a harvest file naming a module that building the world imports)."""
    named = [f"{tool.name} ({tool.python})" for tool in world.tools if tool.python is not None]
    if named:
        raise SpecError(f"{where}: tools naming Python code in a world that must be data only: {', '.join(named[:5])}")
