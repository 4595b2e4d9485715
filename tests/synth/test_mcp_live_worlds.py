"""Live MCP worlds from the CLI (issue 45, parts 1 and 2): `envgym synth run --mcp-server CMD --live` on the real
knowledge-graph memory server (@modelcontextprotocol/server-memory, state in `MEMORY_FILE_PATH={state}/...`).

The world's tools are the server itself, one fresh server per episode over the folder's seeded `state/`; tasks come
from walks over its tools, so every value and answer is one the server returned.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData, build_environment, read_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.world.state import WorldState
from tests.synth.mcp_commands import MEMORY

pytestmark = pytest.mark.mcp


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], EnvironmentData]:
    """(the CLI's report for the server, the written folder loaded as an env)."""
    out = tmp_path_factory.mktemp("live")
    capture = out / "summary.json"
    argv = ["synth", "run", "--live", "--domains", "0", "--seed", "1", "--tasks-per-env", "3", "--out", str(out),
            "--mcp-server", MEMORY, "--env", "MEMORY_FILE_PATH={state}/memory.jsonl", "--json"]
    with pytest.MonkeyPatch.context() as mp:
        printed: list[Any] = []
        mp.setattr("envgym.cli.synth.print_json", printed.append)
        assert main(argv) == 0
    capture.write_text(json.dumps(printed[0]))
    report = printed[0]["mcp_live"]["memory-server"]
    world, tasks = read_environment(out / report["env"])
    return report, build_environment(world, tasks, out / report["env"])


def test_live_tasks_chain_calls_on_the_servers_own_values(built: tuple[dict[str, Any], EnvironmentData]) -> None:
    report, data = built
    assert report["tasks_kept"] >= 2, report
    assert statistics.median(len(t.solution) for t in data.tasks) >= 2
    assert any(isinstance(v, list | dict) for t in data.tasks for c in t.solution for v in c.arguments.values())
    assert (data.directory / "state" / "memory.jsonl").is_file()  # type: ignore[operator]
    assert all(t.python is None and t.effect is None for t in data.world.tools)
    assert set(report["tools_used"]) | set(report["tools_not_used"]) == {
        "create_entities", "create_relations", "add_observations", "delete_entities", "delete_observations",
        "delete_relations", "read_graph", "search_nodes", "open_nodes"}
    assert all(why for why in report["tools_not_used"].values())


def test_the_reference_solution_replayed_on_a_fresh_server_gives_the_stored_results(
        built: tuple[dict[str, Any], EnvironmentData]) -> None:
    _, data = built
    for task in data.tasks:
        state = WorldState({})
        results = [data.executor.execute(state, c.name, c.arguments) for c in task.solution]
        assert all(r.ok for r in results), task.id
        assert [r.value for r in results] == task.meta["results"], task.id


def test_the_oracle_scores_one_and_doing_nothing_zero(built: tuple[dict[str, Any], EnvironmentData]) -> None:
    _, data = built
    env = ToolWorldEnv(data=data, guard=False)
    for task in data.tasks:
        assert run_episode(env, OraclePolicy(data), seed=0, options={"task_id": task.id}).reward == 1.0, task.id
        assert run_episode(env, RefusePolicy(), seed=0, options={"task_id": task.id}).reward == 0.0, task.id
    env.close()


def test_a_write_in_one_episode_is_invisible_in_the_next(built: tuple[dict[str, Any], EnvironmentData]) -> None:
    _, data = built
    graph = next(t.name for t in data.world.tools if t.name == "read_graph")
    writes = next(t for t in data.tasks if "write" in t.tags)
    before = data.executor.execute(WorldState({}), graph, {}).value
    episode = WorldState({})
    for call in writes.solution:
        assert data.executor.execute(episode, call.name, call.arguments).ok
    assert data.executor.execute(episode, graph, {}).value != before
    assert data.executor.execute(WorldState({}), graph, {}).value == before
