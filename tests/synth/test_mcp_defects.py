"""The defects of issue 45 on real MCP servers, one test each: every one failed on the code before the fix.

Servers: @modelcontextprotocol/server-everything (the protocol test server), @modelcontextprotocol/server-memory (a
knowledge graph in a JSONL file), mcp-server-sqlite and todo-txt-mcp (see tests/synth/mcp_commands.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from envgym.loader import build_environment, read_environment
from envgym.world.live import LIVE_TABLE
from envgym.world.spec import ToolCall
from envgym.world.state import WorldState
from synth.mcp_harvest import HarvestError, harvest
from synth.mcp_live import EpisodeMCPTools, directory_digest
from synth.mcp_worlds import map_server, mcp_world
from synth.program import Program
from synth.stages.mcp import env_name, run_mcp
from synth.stages.tasks import solve
from tests.synth.mcp_commands import EVERYTHING, MEMORY, SQLITE, TODO

pytestmark = pytest.mark.mcp


def test_stored_answers_are_what_the_written_world_returns(tmp_path: Path) -> None:
    """Defect 1: the world was solved in the server's field order and stored with sorted keys, so the folder's
    world drew other values than the ones the answers were computed on."""
    specs = harvest([EVERYTHING])
    run_mcp(specs, tmp_path, seed=1, tasks_per_env=6)
    world, tasks = read_environment(tmp_path / env_name(str(specs[0].source["server_name"])))  # type: ignore[index]
    data = build_environment(world, tasks)
    asked = [t for t in tasks if t.answers]
    assert asked, "no task with an answer was kept"
    for task in asked:
        _, reply = solve(Program.model_validate(task.meta["program"]), data.executor, data.initial.copy(), {})
        assert [str(v) for v in reply.values] == [a.value for a in task.answers], task.id


def test_a_required_search_query_is_filled_from_a_seen_value(tmp_path: Path) -> None:
    """Defect 2: `search_nodes(query)` was mapped, every draw failed on the missing query and was dropped silently."""
    specs = harvest([MEMORY], env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")})
    summary = run_mcp(specs, tmp_path / "out", seed=1, tasks_per_env=4)
    (info,) = summary.values()
    assert "search_nodes" in info["tools_mapped"]
    assert info["tasks_verified"] > 0, info


def test_list_options_do_not_become_record_fields(tmp_path: Path) -> None:
    """Defect 3: `list_todos(include_completed)` made `include_completed` a field of every todo."""
    (tmp_path / "todo.txt").touch()
    specs = harvest([TODO.replace("{state}", str(tmp_path))])
    mappings = map_server(specs)
    world = mcp_world("mcp_todo", "todo-txt-mcp", specs, mappings, seed=1)
    for entity in world.entities.values():
        assert "include_completed" not in entity.fields
    listing = next(m for m in mappings if m.tool == "list_todos")
    assert not listing.mapped and "include_completed" in listing.reason


def test_state_named_in_the_environment_is_per_episode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 5: `{state}` in `MEMORY_FILE_PATH` (the documented way) was not substituted, so episodes shared it."""
    monkeypatch.chdir(tmp_path)
    template = tmp_path / "template"
    template.mkdir()
    env = {"MEMORY_FILE_PATH": "{state}/memory.jsonl"}
    episodes = EpisodeMCPTools(harvest([MEMORY], env=env), template, env=env)
    tools = episodes.functions()
    first, second = WorldState({}), WorldState({})
    try:
        tools["create_entities"](first, entities=[{"name": "Ada", "entityType": "person", "observations": ["tea"]}])
        assert "Ada" in json.dumps(tools["read_graph"](first))
        assert "Ada" not in json.dumps(tools["read_graph"](second))
        assert LIVE_TABLE in first.tables and LIVE_TABLE not in second.tables
    finally:
        episodes.stop(first)
        episodes.stop(second)
    assert not (tmp_path / "{state}").exists()
    assert list(template.iterdir()) == []


def test_a_server_whose_writes_leave_no_trace_is_refused(tmp_path: Path) -> None:
    """Defect 6: a toggle held in the server's memory changed nothing grading could see, and nothing said so."""
    episodes = EpisodeMCPTools(harvest([f"{EVERYTHING} {{state}}"]), tmp_path)
    with pytest.raises(HarvestError, match=r"toggle_simulated_logging.*no trace"):
        episodes.require_trace([ToolCall(name="toggle_simulated_logging", arguments={})])


def test_the_digest_can_leave_out_timestamped_backups(tmp_path: Path) -> None:
    """Defect 7: todo-txt-mcp writes `.backups/todo.txt.<second>.bak`, so two replays of one write never matched."""
    template = tmp_path / "template"
    template.mkdir()
    (template / "todo.txt").write_text("(A) call mum\n")
    specs = harvest([TODO], state_template=template)
    episodes = EpisodeMCPTools(specs, template, exclude=[".backups/*"])
    add = episodes.functions()["add_todo"]
    first, second = WorldState({}), WorldState({})
    try:
        add(first, text="buy milk")
        start = int(time.time())
        while int(time.time()) == start:  # the backups are named by the second: make the two seconds differ
            time.sleep(0.05)
        add(second, text="buy milk")
        folders = episodes.folder(first), episodes.folder(second)
        assert directory_digest(folders[0]) != directory_digest(folders[1])
        assert first.tables[LIVE_TABLE] == second.tables[LIVE_TABLE]
    finally:
        episodes.stop(first)
        episodes.stop(second)


def test_harvesting_a_command_with_a_state_placeholder_leaves_no_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 8: harvesting `mcp-server-sqlite --db-path {state}/db.sqlite` left `./{state}/db.sqlite` behind."""
    monkeypatch.chdir(tmp_path)
    specs = harvest([SQLITE])
    assert {s.source["tool"] for s in specs if s.source} >= {"read_query", "write_query", "list_tables"}
    assert all("{state}/db.sqlite" in s.source["server"] for s in specs if s.source)
    assert all(s.python is None for s in specs)
    assert list(tmp_path.iterdir()) == []
