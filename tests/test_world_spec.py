"""The world file format: loading, errors that name file and path, the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.cli import main
from envgym.world.files import dump_world, load_tasks, load_world
from envgym.world.spec import SpecError, WorldSpec


def test_bad_world_names_file_and_path(tmp_path: Path) -> None:
    bad = tmp_path / "world.yaml"
    bad.write_text("name: x\ntools:\n  - name: t\n    description: d\n    effect: {op: explode, entity: e}\n")
    with pytest.raises(SpecError) as err:
        load_world(bad)
    message = str(err.value)
    assert str(bad) in message
    assert "tools.0.effect.op" in message


def test_unknown_entity_in_effect_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "world.yaml"
    bad.write_text("name: x\ntools:\n  - name: t\n    description: d\n    effect: {op: get, entity: ghosts}\n")
    with pytest.raises(SpecError, match="ghosts"):
        load_world(bad)


def test_tool_needs_an_implementation() -> None:
    with pytest.raises(ValueError, match="exactly one of 'effect', 'mechanism' or 'python'"):
        WorldSpec.model_validate({"name": "x", "tools": [{"name": "t", "description": "d"}]})


def test_bad_task_line_names_file_and_line(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "instruction": "i", "opening": "o"}\n{"id": "b", "instruction": 3}\n')
    with pytest.raises(SpecError) as err:
        load_tasks(tasks)
    assert f"{tasks}:2" in str(err.value)
    assert "opening" in str(err.value)


def test_world_round_trips_through_yaml(tmp_path: Path, shop_world: WorldSpec) -> None:
    dump_world(shop_world, tmp_path / "w.yaml")
    assert load_world(tmp_path / "w.yaml") == shop_world


def test_schema_command_prints_the_format(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "tools" in schema["world"]["properties"]
    assert "solution" in schema["task"]["properties"]


def _alias_bomb(levels: int = 9) -> str:
    """A "billion laughs" world file: about 1 KB that expands to 10**levels strings when aliases are followed."""
    lines = ["name: bomb", "meta:", '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, levels)]
    lines += ["tools:", "  - {name: t, description: d, python: 'tools:t'}"]
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_naming_the_file(tmp_path: Path) -> None:
    bomb = tmp_path / "world.yaml"
    bomb.write_text(_alias_bomb())
    assert len(bomb.read_bytes()) < 2048
    with pytest.raises(SpecError) as err:
        load_world(bomb)
    assert str(bomb) in str(err.value) and "alias" in str(err.value)


def test_a_world_dumped_with_shared_values_loads_back(tmp_path: Path, shop_world: WorldSpec) -> None:
    shared = {"type": "object", "properties": {}, "additionalProperties": False}
    world = shop_world.model_copy(update={"meta": {"a": shared, "b": shared}})
    dump_world(world, tmp_path / "w.yaml")
    assert load_world(tmp_path / "w.yaml") == world


def test_duplicate_task_ids_in_a_large_file_are_named_with_their_lines(tmp_path: Path) -> None:
    # 106k lines, the size of the file that took the old count-per-id check over 120 s.
    count = 106_000
    lines = [json.dumps({"id": f"t{i}", "instruction": "i", "opening": "o"}) for i in range(count)]
    lines.append(json.dumps({"id": "t5", "instruction": "i", "opening": "o"}))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecError) as err:
        load_tasks(tasks)
    assert str(err.value) == f"{tasks}: duplicate task ids: 't5' on lines 6 and {count + 1}"

