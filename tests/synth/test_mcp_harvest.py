"""Harvesting real MCP servers over stdio and calling their tools live (needs the servers installed; see README)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.world.spec import WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor
from synth.mcp_harvest import LiveMCPTools, harvest

pytestmark = pytest.mark.mcp
SERVERS = ("mcp-server-time", "mcp-server-git", "mcp-server-filesystem")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    missing = [s for s in SERVERS if shutil.which(s) is None]
    if missing:
        pytest.fail(f"MCP servers not installed: {missing}; see the CI commands in tests/synth/README.md")
    root = tmp_path_factory.mktemp("mcp")
    (root / "notes.txt").write_text("hello from envgym\n")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return {"time": "mcp-server-time --local-timezone UTC", "git": f"mcp-server-git --repository {root}",
            "fs": f"mcp-server-filesystem {root}", "root": str(root)}


def test_harvest_imports_the_tools_of_three_real_servers(servers: dict[str, str]) -> None:
    specs = harvest([servers["time"], servers["git"], servers["fs"]])
    by_server = {s.source["server_name"] for s in specs if s.source}
    assert len(by_server) == 3
    names = {s.name for s in specs}
    assert {"get_current_time", "git_status", "list_directory"} <= names
    status = next(s for s in specs if s.name == "git_status")
    assert status.parameters["type"] == "object" and "repo_path" in status.parameters["properties"]
    assert "read_only" in status.labels and status.source == {**status.source, "kind": "mcp", "tool": "git_status"}
    assert "destructive" in next(s for s in specs if s.name == "write_file").labels


def test_harvested_tools_run_live_through_their_servers(servers: dict[str, str]) -> None:
    specs = harvest([servers["time"], servers["git"], servers["fs"]])
    world = WorldSpec(name="mcp", tools=specs)
    with LiveMCPTools(specs) as live:
        executor = ToolExecutor(world, extra=live.functions())
        state = WorldState({})
        now = executor.execute(state, "get_current_time", {"timezone": "Asia/Tokyo"})
        assert now.ok and now.value["timezone"] == "Asia/Tokyo"
        git = executor.execute(state, "git_status", {"repo_path": servers["root"]})
        assert git.ok and "notes.txt" in json.dumps(git.value)
        listing = executor.execute(state, "list_directory", {"path": servers["root"]})
        assert listing.ok and "notes.txt" in json.dumps(listing.value)
        denied = executor.execute(state, "read_text_file", {"path": "/etc/hostname"})
        assert not denied.ok and denied.error_kind == "tool_error"


def test_harvest_cli_writes_tool_specs(servers: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "tools.jsonl"
    result = subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "harvest-mcp", "--server", servers["time"],
                             "--out", str(out), "--json"], capture_output=True, text=True, check=True,
                            cwd=Path(__file__).parents[2])
    assert json.loads(result.stdout)["tools"] == len(out.read_text().splitlines()) >= 2
