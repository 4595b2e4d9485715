"""MCP-grounded worlds (issue 15, part 1): harvested tool schemas mapped onto a data model, tasks verified.

The mapping tests build tool specs in code; the acceptance test harvests the three real servers of CI
(mcp-server-time, mcp-server-git, @modelcontextprotocol/server-filesystem) and synthesizes a world from each.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import envgym
from envgym.env import ToolWorldEnv
from envgym.play.episode import run_episodes
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.world.spec import ToolSpec
from synth.mcp_worlds import map_server, map_tool
from synth.stages.mcp import run_mcp
from synth.stats import collect_stats

REPO = Path(__file__).parents[2]


def _tool(name: str, props: dict[str, Any], required: list[str] | None = None,
          annotations: dict[str, Any] | None = None) -> ToolSpec:
    source: dict[str, Any] = {"kind": "mcp", "server": ["notes-server"], "server_name": "notes", "tool": name}
    if annotations:
        source["annotations"] = annotations
    return ToolSpec(name=name, description=f"{name} tool",
                    parameters={"type": "object", "properties": props, "required": required or list(props)},
                    source=source)


NOTE_TOOLS = [
    _tool("create_note", {"note_id": {"type": "string"}, "title": {"type": "string"},
                          "pages": {"type": "integer"}}),
    _tool("get_note", {"note_id": {"type": "string"}}),
    _tool("list_notes", {"title": {"type": "string"}}, required=[]),
    _tool("delete_note", {"note_id": {"type": "string"}}),
    _tool("update_note", {"note_id": {"type": "string"}, "title": {"type": "string"}}, required=["note_id"]),
    _tool("summarize_note", {"note_id": {"type": "string"}}),
    _tool("add_labels", {"tags": {"type": "array", "items": {"type": "string"}}}),
]


def test_crud_tools_map_onto_one_entity_and_the_rest_say_why_not() -> None:
    mappings = {m.tool: m for m in map_server(NOTE_TOOLS)}
    assert {t: (m.op, m.entity) for t, m in mappings.items() if m.mapped} == {
        "create_note": ("create", "note"), "get_note": ("get", "note"), "list_notes": ("list", "note"),
        "delete_note": ("delete", "note"), "update_note": ("update", "note")}
    assert "'summarize' is not an entity operation" in mappings["summarize_note"].reason
    assert "'tags' is array" in mappings["add_labels"].reason


def test_read_only_only_where_the_mapping_proves_it() -> None:
    claims_read_only = _tool("create_note", {"note_id": {"type": "string"}}, annotations={"read_only_hint": True})
    assert "read_only" not in map_tool(claims_read_only, None).labels
    get = map_tool(_tool("get_note", {"note_id": {"type": "string"}}, annotations={"open_world_hint": True}), None)
    assert get.labels == ["read_only", "reads_untrusted"]
    delete = map_tool(_tool("delete_note", {"note_id": {"type": "string"}}), None)
    assert delete.labels == ["destructive"]
    unmapped = map_tool(_tool("convert_note", {"note_id": {"type": "string"}}, annotations={"read_only_hint": True}),
                        None)
    assert not unmapped.mapped and unmapped.labels == []


def test_a_get_with_an_argument_the_model_cannot_mean_is_not_mapped() -> None:
    head = map_tool(_tool("read_file", {"path": {"type": "string"}, "head": {"type": "number"}}, ["path"]), None)
    assert not head.mapped and "'head' changes what the get does" in head.reason


def test_an_entity_named_by_two_different_arguments_keeps_the_first() -> None:
    tools = [_tool("get_note", {"note_id": {"type": "string"}}), _tool("delete_note", {"slug": {"type": "string"}})]
    delete = map_server(tools)[1]
    assert not delete.mapped and "named by 'note_id' elsewhere" in delete.reason


def test_worlds_from_code_built_tools_are_verified_and_byte_identical(tmp_path: Path) -> None:
    summary = run_mcp(NOTE_TOOLS, tmp_path / "a", seed=5, tasks_per_env=6)
    run_mcp(NOTE_TOOLS, tmp_path / "b", seed=5, tasks_per_env=6)
    notes = summary["notes"]
    assert notes["env"] == "mcp_notes" and notes["tasks_verified"] >= 4, notes
    for name in ("world.yaml", "tasks.jsonl", "README.md"):
        assert (tmp_path / "a" / "mcp_notes" / name).read_bytes() == (tmp_path / "b" / "mcp_notes" / name).read_bytes()
    assert "summarize_note" in (tmp_path / "a" / "mcp_notes" / "README.md").read_text()


@pytest.fixture(scope="module")
def harvested(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("mcp-worlds")
    repo = root / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = root / "harvest.jsonl"
    subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "harvest-mcp", "--server",
                    "mcp-server-time --local-timezone UTC", "--server", f"mcp-server-filesystem {repo}",
                    "--out", str(out)], check=True, cwd=REPO, capture_output=True, timeout=300)
    return out


@pytest.mark.mcp
def test_worlds_from_three_real_servers_verify_and_the_oracle_scores_1(harvested: Path, tmp_path: Path) -> None:
    out = tmp_path / "suite"
    # Two servers from a harvest file, the third harvested by the run itself.
    git = f"mcp-server-git --repository {harvested.parent / 'repo'}"
    result = subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "run", "--domains", "0", "--mcp",
                             str(harvested), "--mcp-server", git, "--tasks-per-env", "4", "--out", str(out),
                             "--json"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    per_server = json.loads(result.stdout)["mcp"]
    assert set(per_server) == {"mcp-time", "mcp-git", "secure-filesystem-server"}
    assert per_server["mcp-time"]["tools_mapped"] == {"get_current_time": "get current_time"}
    assert "'convert'" in per_server["mcp-time"]["tools_not_mapped"]["convert_time"]
    assert "git_create_branch" in per_server["mcp-git"]["tools_mapped"]
    assert "git_commit" in per_server["mcp-git"]["tools_not_mapped"]
    fs = per_server["secure-filesystem-server"]
    assert "create_directory" in fs["tools_mapped"] and "'edits' is array" in fs["tools_not_mapped"]["edit_file"]
    for server, info in per_server.items():
        assert info["tasks_verified"] >= 1, (server, info)
    ids = envgym.register_dir(out)
    assert len(ids) == 3
    for env_id in ids:
        env = gym.make(env_id).unwrapped
        assert isinstance(env, ToolWorldEnv)
        tasks = [t.id for t in env.data.tasks]
        oracle = run_episodes(env, OraclePolicy(), len(tasks), task_ids=tasks)
        assert [t.reward for t in oracle] == [1.0] * len(tasks), env_id
        nothing = run_episodes(env, RefusePolicy(), len(tasks), task_ids=tasks)
        assert [t.reward for t in nothing] == [0.0] * len(tasks), env_id
    stats = collect_stats(out)
    assert stats["tasks_by_source"] == {"procedural": 0, "mcp": stats["tasks"]} and stats["tasks"] >= 3
