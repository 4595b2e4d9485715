"""`envgym mcp serve`: an env as an MCP server, driven by the mcp SDK's own client over stdio and streamable HTTP."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import gymnasium as gym
import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters

from envgym.env import ToolWorldEnv
from envgym.play.policies import OraclePolicy
from envgym.play.tool_turns import USER_TOOL
from envgym.protocol import parse_action
from tests.sandbox.serving import REPO_ROOT, Served, child_env, start

pytestmark = pytest.mark.mcp

TASK = "buy_P0001_U0007"  # retail: a purchase, so the end state differs from the start


def oracle_in_process(task: str = TASK, seed: int = 0) -> tuple[list[Any], float, str]:
    """The oracle's actions on `task`, and the reward and state hash they reach in-process."""
    env = gym.make("envgym/retail-v0", disable_env_checker=True).unwrapped
    assert isinstance(env, ToolWorldEnv)
    policy, actions = OraclePolicy(), []
    obs, info = env.reset(seed=seed, options={"task_id": task})
    reward, done = 0.0, False
    while not done:
        action = policy.act(obs, info)
        actions.append(action)
        obs, r, terminated, truncated, info = env.step(action)
        reward, done = float(r), terminated or truncated
    assert env.state is not None
    return actions, reward, env.state.hash()


async def play(client: Client, actions: list[Any]) -> list[str]:
    """Replay the oracle's turns as MCP tool calls; returns every result text the agent saw."""
    seen = []
    for action in actions:
        message, calls = parse_action(action)
        if calls:
            for call in calls:
                result = await client.call_tool(call.name, call.arguments)
                seen.append(result.content[0].text)
        else:
            result = await client.call_tool(USER_TOOL, {"message": message["content"]})
            seen.append(result.content[0].text)
    return seen


def serve_argv(*extra: str) -> list[str]:
    return [sys.executable, "-m", "envgym.cli", "mcp", "serve", "retail", *extra]


def test_stdio_oracle_episode_reaches_reward_one_and_the_in_process_state(tmp_path: Path) -> None:
    actions, reward, state_hash = oracle_in_process()
    assert reward == 1.0
    report = tmp_path / "report.jsonl"
    params = StdioServerParameters(command=sys.executable, args=serve_argv("--task", TASK, "--report", str(report))[1:],
                                   env=child_env(), cwd=str(REPO_ROOT))

    async def main() -> list[str]:
        async with Client(params) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            # The agent's surface: the world's tools and its turn to the user; no reset, no grading.
            assert set(tools) == {*(t["function"]["name"] for t in _retail_tools()), USER_TOOL}
            prompt = await client.get_prompt("episode")
            assert "Yoga Mat" in prompt.messages[-1].content.text
            return await play(client, actions)

    seen = anyio.run(main)
    records = [json.loads(line) for line in report.read_text().splitlines()]
    assert [(r["task_id"], r["reward"], r["state_hash"]) for r in records] == [(TASK, 1.0, state_hash)]
    assert not any("reward" in text.lower() for text in seen)


def _retail_tools() -> list[dict[str, Any]]:
    env = gym.make("envgym/retail-v0", disable_env_checker=True).unwrapped
    assert isinstance(env, ToolWorldEnv)
    return env.data.executor.openai_tools()


def test_tools_carry_their_schemas_and_labels_as_annotations() -> None:
    from envgym.serve.mcp_episodes import EpisodeBook
    from envgym.serve.mcp_server import build_server

    book = EpisodeBook("envgym/retail-v0")

    async def main() -> dict[str, Any]:
        async with Client(build_server(book, stdio=True)) as client:
            return {t.name: t for t in (await client.list_tools()).tools}

    tools = anyio.run(main)
    for spec in book.world.tools:
        tool = tools[spec.name]
        assert tool.input_schema == spec.parameters
        assert tool.annotations.read_only_hint is spec.read_only
        assert tool.annotations.open_world_hint is ("egress" in spec.labels)
    assert tools["cancel_pending_order"].annotations.destructive_hint is True
    assert tools["get_order_details"].annotations.destructive_hint is False
    book.close()


@pytest.fixture(scope="module")
def http_server() -> Any:
    served = start(serve_argv("--transport", "http", "--port", "0", "--task", TASK),
                   r"on (http://\S+) \(token file: (\S+), admin token file: (\S+)\)")
    yield served
    served.stop()


def _admin_token(served: Served) -> str:
    line = next(line for line in served.stderr if "admin token file" in line)
    return Path(line.rsplit("admin token file: ", 1)[1].rstrip(")\n")).read_text().strip()


def _client(served: Served, token: str | None = None) -> Client:
    headers = {"Authorization": f"Bearer {token or served.token()}"}
    return Client(_transport(served.url, headers))


def _transport(url: str, headers: dict[str, str]) -> Any:
    from mcp.client.streamable_http import streamable_http_client

    return streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=120))


def _episodes(served: Served) -> list[dict[str, Any]]:
    base = served.url.rsplit("/mcp", 1)[0]
    response = httpx.get(f"{base}/admin/episodes", headers={"Authorization": f"Bearer {_admin_token(served)}"},
                         timeout=60)
    response.raise_for_status()
    return list(response.json()["episodes"])


def test_http_oracle_episode_reaches_reward_one_and_the_in_process_state(http_server: Served) -> None:
    actions, _, state_hash = oracle_in_process()

    async def main() -> list[dict[str, Any]]:
        async with _client(http_server) as client:
            await play(client, actions)
            # The operator reads the reward while the session is open (its episode ends with it).
            return await anyio.to_thread.run_sync(_episodes, http_server)

    [record] = anyio.run(main)
    assert (record["task_id"], record["done"], record["reward"], record["state_hash"]) == (TASK, True, 1.0, state_hash)


def test_http_sessions_hold_separate_worlds_and_the_operator_resets_one(http_server: Served) -> None:
    actions, _, solved_hash = oracle_in_process()

    def reset(session: str) -> httpx.Response:
        base = http_server.url.rsplit("/mcp", 1)[0]
        return httpx.post(f"{base}/admin/episodes/{session}/reset", json={"seed": 5},
                          headers={"Authorization": f"Bearer {_admin_token(http_server)}"}, timeout=60)

    async def main() -> tuple[list[dict[str, Any]], httpx.Response]:
        async with _client(http_server) as solver, _client(http_server) as idle:
            await idle.call_tool(USER_TOOL, {"message": "Hello, how can I help?"})
            await play(solver, actions)
            over = await solver.call_tool(USER_TOOL, {"message": "anything else?"})
            assert over.is_error and "episode is over" in over.content[0].text
            episodes = await anyio.to_thread.run_sync(_episodes, http_server)
            solved = next(e["session"] for e in episodes if e["done"])
            return episodes, await anyio.to_thread.run_sync(reset, solved)

    episodes, reset_reply = anyio.run(main)
    assert sorted((e["done"], e["state_hash"] == solved_hash) for e in episodes) == [(False, False), (True, True)]
    assert reset_reply.status_code == 200 and reset_reply.json()["done"] is False
    assert reset_reply.json()["state_hash"] != solved_hash


def _wait_for(condition: Callable[[], bool], timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_closed_session_leaves_no_episode_behind(http_server: Served) -> None:
    async def session() -> list[dict[str, Any]]:
        async with _client(http_server) as client:
            await client.call_tool("get_product_details", {"product_id": "P0001"})
            return await anyio.to_thread.run_sync(_episodes, http_server)

    for _ in range(2):
        assert len(anyio.run(session)) == 1  # the open session's episode, and no closed one's
    assert _wait_for(lambda: _episodes(http_server) == []), _episodes(http_server)


def test_an_expired_session_leaves_no_episode_behind() -> None:
    from mcp.client.streamable_http import streamable_http_client

    from envgym.serve.mcp_episodes import EpisodeBook
    from envgym.serve.mcp_http import MCP_PATH, build_http_app, listen, serve_http

    book = EpisodeBook("envgym/retail-v0", task=TASK)
    app = build_http_app(book, host="127.0.0.1", agent_token=None, admin_token="operator", session_idle_timeout=0.5)
    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{MCP_PATH}"

    async def main() -> list[int]:
        counts = []
        async with anyio.create_task_group() as server:
            server.start_soon(serve_http, app, sock)
            for _ in range(2):  # clients that go away without closing their session
                transport = streamable_http_client(url, http_client=httpx2.AsyncClient(timeout=120),
                                                   terminate_on_close=False)
                async with Client(transport) as client:
                    await client.call_tool("get_product_details", {"product_id": "P0001"})
                counts.append(len(book.records()))
            counts.append(await anyio.to_thread.run_sync(lambda: _wait_for(lambda: book.records() == [])))
            server.cancel_scope.cancel()
        return counts

    assert anyio.run(main) == [1, 2, True]
    book.close()


def test_http_refuses_missing_tokens_and_the_agent_token_on_admin_routes(http_server: Served) -> None:
    base = http_server.url.rsplit("/mcp", 1)[0]
    assert httpx.post(http_server.url, json={}, timeout=60).status_code == 401
    agent = {"Authorization": f"Bearer {http_server.token()}"}
    assert httpx.get(f"{base}/admin/episodes", headers=agent, timeout=60).status_code == 401


def test_a_malformed_call_is_an_error_result_and_the_session_goes_on(http_server: Served) -> None:
    async def main() -> tuple[Any, Any, Any]:
        async with _client(http_server) as client:
            bad = await client.call_tool("get_order_details", {"no_such_argument": 1})
            unknown = await client.call_tool("reset", {})
            good = await client.call_tool("get_product_details", {"product_id": "P0001"})
            return bad, unknown, good

    bad, unknown, good = anyio.run(main)
    assert bad.is_error and "order_id" in bad.content[0].text
    assert unknown.is_error and "unknown tool 'reset'" in unknown.content[0].text
    assert not good.is_error and "Yoga Mat" in good.content[0].text


@pytest.mark.parametrize(("argv", "message"), [
    (["mcp", "serve", "retail", "--task", "nope"], "environment 'retail' has no task 'nope'"),
    (["mcp", "serve", "retail", "--transport", "http", "--no-auth", "--host", "0.0.0.0"], "not a loopback address"),
])
def test_bad_serve_arguments_are_one_line_errors(argv: list[str], message: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    from envgym.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
