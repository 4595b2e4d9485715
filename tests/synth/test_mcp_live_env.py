"""Live MCP tools in an env only where each episode starts from a reset server (issue 15, part 2).

The finding: an env on live sqlite tools shared by every episode let the hidden reference replay write into the
agent's database, and an agent that did nothing scored 1.0. Such an env must not build; one with a fresh server per
episode grades the server's state: do-nothing 0, the oracle 1.0, and the replay never touches the agent's database.
"""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.world.errors import EnvConfigError
from envgym.world.spec import TaskSpec, ToolCall, ToolSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor
from synth.mcp_harvest import HarvestError, LiveMCPTools, harvest
from synth.mcp_live import EpisodeMCPTools

pytestmark = pytest.mark.mcp
NOTES = Path(__file__).parent / "mcp_servers" / "notes_server.py"
TASK = TaskSpec(id="note-milk", instruction="You want a note that says buy milk.", opening="Please add a note saying 'buy milk'.",
                solution=[ToolCall(name="add_note", arguments={"text": "buy milk"})], final_reply="Done.")


def _notes(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT text FROM notes ORDER BY rowid")]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[ToolSpec]]:
    """A notes server on one database file: (the file, its harvested tools)."""
    db = tmp_path_factory.mktemp("shared") / "notes.db"
    return db, harvest([f"{sys.executable} {NOTES} {db}"])


def _data(specs: list[ToolSpec], extra: dict[str, Any]) -> EnvironmentData:
    world = WorldSpec(name="notes", tools=specs)
    return EnvironmentData(world, [TASK], None, WorldState({}), ToolExecutor(world, extra=extra))


def test_an_env_on_a_shared_live_server_does_not_build(shared: tuple[Path, list[ToolSpec]]) -> None:
    db, specs = shared
    refused = r"tool 'add_note' runs live .* cannot be reset between episodes"
    with LiveMCPTools(specs) as live, pytest.raises(EnvConfigError, match=refused):
        env = ToolWorldEnv(data=_data(specs, live.functions()), guard=False)
        # What the old code let happen, kept here so that a failure says what went wrong:
        run = run_episode(env, RefusePolicy(), seed=0, options={"task_id": TASK.id})
        assert run.reward < 1.0, f"a do-nothing agent scored {run.reward}; the database holds {_notes(db)}"


def test_live_tools_without_an_implementation_do_not_build(shared: tuple[Path, list[ToolSpec]]) -> None:
    _, specs = shared
    with pytest.raises(EnvConfigError, match="has no implementation here"):
        _data(specs, {})


def test_a_fresh_server_per_episode_grades_the_servers_state(tmp_path: Path) -> None:
    template = tmp_path / "template"
    template.mkdir()
    with sqlite3.connect(template / "notes.db") as conn:
        conn.execute("CREATE TABLE notes (text TEXT NOT NULL)")
        conn.execute("INSERT INTO notes VALUES ('call mum')")
    specs = harvest([f"{sys.executable} {NOTES} {{state}}/notes.db"], timeout_s=60)
    episodes = EpisodeMCPTools(specs, template)
    env = ToolWorldEnv(data=_data(specs, episodes.functions()), guard=False)
    assert run_episode(env, RefusePolicy(), seed=0, options={"task_id": TASK.id}).reward == 0.0
    oracle = run_episode(env, OraclePolicy(env.data), seed=0, options={"task_id": TASK.id})
    assert oracle.reward == 1.0, oracle
    env.close()
    assert _notes(template / "notes.db") == ["call mum"]  # neither the replay nor an episode wrote the template


def test_a_server_command_without_a_state_placeholder_is_refused(shared: tuple[Path, list[ToolSpec]],
                                                                tmp_path: Path) -> None:
    _, specs = shared
    with pytest.raises(HarvestError, match="no \\{state\\} placeholder"):
        EpisodeMCPTools(specs, tmp_path)
