"""Untrusted file inputs stay data (issue 41, finding 3): harvested and synthesized worlds never carry a `python`
reference, and world, task and harvest files are bounded in size, count and depth with one-line errors."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envgym.world.files import load_tasks, load_world
from envgym.world.spec import SpecError

TOOL = {
    "name": "get_note", "description": "Get a note by its id.",
    "parameters": {"type": "object", "properties": {"note_id": {"type": "string"}}, "required": ["note_id"]},
    "source": {"kind": "mcp", "server": ["notes"], "server_name": "notes", "tool": "get_note"},
}
PLANTED = "import pathlib\npathlib.Path(__file__).with_name('IMPORTED').write_text('ran')\ndef run(state, **a):\n    return 1\n"


def _harvest(tmp_path: Path, **extra: object) -> Path:
    path = tmp_path / "harvest.jsonl"
    path.write_text(json.dumps({"spec": {**TOOL, **extra}}) + "\n")
    return path


def test_a_harvest_file_naming_python_code_is_refused_and_nothing_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from envgym.cli import main

    (tmp_path / "planted_tools.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))  # `python -m envgym.cli` puts the working folder on sys.path
    harvest = _harvest(tmp_path, python="planted_tools:run")
    code = main(["synth", "run", "--mcp", str(harvest), "--domains", "0", "--out", str(tmp_path / "out")])
    assert not (tmp_path / "IMPORTED").exists(), "building the harvested world imported a module the file named"
    assert code == 2 and "names Python code" in capsys.readouterr().err


def test_a_mapped_mcp_tool_never_keeps_a_python_reference() -> None:
    from envgym.world.spec import ToolSpec
    from synth.mcp_worlds import map_server, mcp_world

    spec = ToolSpec.model_validate({**TOOL, "python": "os:system"})
    mappings = map_server([spec])
    world = mcp_world("mcp_notes", "notes", [spec], mappings, seed=0)
    assert world.tools and all(tool.python is None for tool in world.tools)


def test_a_synthesized_world_naming_python_code_is_refused() -> None:
    from envgym.world.inputs import refuse_code
    from envgym.world.spec import WorldSpec

    world = WorldSpec.model_validate({"name": "w", "tools": [{**TOOL, "python": "os:system"}]})
    with pytest.raises(SpecError, match="must be data only"):
        refuse_code(world, "synthesized world w")


def _one_line_error(call: object, match: str, within_s: float = 10.0) -> None:
    started = time.monotonic()
    with pytest.raises(SpecError, match=match) as caught:
        call()  # type: ignore[operator]
    assert "\n" not in str(caught.value)
    assert time.monotonic() - started < within_s


@pytest.mark.parametrize(("text", "match"), [
    ("name: w\njunk: [" + "1," * 1_500_000 + "1]\n", "larger than the 2097152 byte limit"),
    ("name: w\njunk: [" + "1, " * 40_000 + "1]\n", "more than 30000 values"),
    ("name: w\njunk: " + "[" * 5_000 + "]" * 5_000 + "\n", "nested deeper than 64"),
    ("name: w\njunk: " + "9" * 5_000 + "\n", "cannot read world file|integer"),
    ("name: w\njunk: " + "9" * 40 + "\n", "integer of 133 bits"),
], ids=["3M-item flow list", "40k-item flow list", "deep flows", "5000-digit integer", "133-bit integer"])
def test_a_world_file_past_a_bound_is_a_quick_one_line_error(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "world.yaml"
    path.write_text(text)
    _one_line_error(lambda: load_world(path), match)


def test_a_world_generating_too_many_records_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "world.json"
    entity = {"key": "id", "count": 1e8, "fields": {"id": {"type": "string"}}}
    path.write_text(json.dumps({"name": "w", "tools": [], "entities": {"things": entity}}))
    _one_line_error(lambda: load_world(path), "100000000 records")


def test_a_deep_json_world_file_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "world.json"
    path.write_text('{"name": "w", "junk": ' + "[" * 100_000 + "]" * 100_000 + "}")
    _one_line_error(lambda: load_world(path), "nested deeper")


def test_a_task_file_of_a_million_tasks_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"id": "t"}\n' * 1_000_000)
    _one_line_error(lambda: load_tasks(path), "at most 200000 tasks")


def test_a_100k_deep_harvest_file_is_a_one_line_error(tmp_path: Path) -> None:
    from synth.stages.mcp import read_harvest

    path = tmp_path / "harvest.jsonl"
    path.write_text('{"spec": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(ValueError, match="nested deeper") as caught:
        read_harvest(path)
    assert "\n" not in str(caught.value)
