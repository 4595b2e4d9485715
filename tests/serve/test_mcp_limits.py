"""`envgym mcp serve` over HTTP under abuse (issue 41): a bounded number of sessions, a short idle timeout, and a
non-ASCII bearer token refused with 401 (it was a 500 with a traceback)."""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest

from envgym.sandbox.limits import MCP_LIMITS
from envgym.serve.mcp_episodes import SESSION_IDLE_TIMEOUT_S, EpisodeBook
from envgym.serve.mcp_http import MCP_PATH, build_http_app, listen, serve_http

pytestmark = pytest.mark.mcp

INITIALIZE = {
    "jsonrpc": "2.0", "id": 1, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "abuse", "version": "0"}},
}
HEADERS = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer agent"}


def _serve(max_sessions: int, requests: list[dict[str, Any]]) -> list[int]:
    """Send `requests` (httpx keyword arguments) one after another to a fresh server; their status codes."""
    book = EpisodeBook("envgym/retail-v0")
    app = build_http_app(book, host="127.0.0.1", agent_token="agent", admin_token="operator",
                         max_sessions=max_sessions)
    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}{MCP_PATH}"

    async def main() -> list[int]:
        codes = []
        async with anyio.create_task_group() as server:
            server.start_soon(serve_http, app, sock)
            async with httpx.AsyncClient(timeout=60) as client:
                for request in requests:
                    codes.append((await client.post(url, **request)).status_code)
            server.cancel_scope.cancel()
        return codes

    try:
        return anyio.run(main)
    finally:
        book.close()


def test_sessions_beyond_the_budget_are_refused_with_503() -> None:
    opening = {"json": INITIALIZE, "headers": HEADERS}
    assert _serve(2, [opening, opening, opening]) == [200, 200, 503]


def test_the_default_budget_and_idle_timeout_are_bounded() -> None:
    assert MCP_LIMITS.max_sessions <= 1024
    assert SESSION_IDLE_TIMEOUT_S <= 600


def test_a_non_ascii_bearer_token_is_refused_with_401() -> None:
    bad = {"json": INITIALIZE, "headers": {**HEADERS, "Authorization": "Bearer éé".encode()}}
    assert _serve(2, [bad]) == [401]


def test_an_oversized_stdio_line_is_an_error_result_and_the_episode_goes_on() -> None:
    import json
    import selectors
    import subprocess
    import sys

    from tests.sandbox.serving import REPO_ROOT, child_env

    proc = subprocess.Popen([sys.executable, "-m", "envgym.cli", "mcp", "serve", "calculator"], cwd=REPO_ROOT,
                            env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)

    def send(message: dict[str, Any]) -> None:
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(message).encode() + b"\n")
        proc.stdin.flush()

    def answer() -> dict[str, Any]:
        assert proc.stdout is not None
        assert selector.select(timeout=120), "no answer within 120 s"
        return json.loads(proc.stdout.readline())

    try:
        send({**INITIALIZE, "id": 1})
        answer()
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        huge = {"name": "calculate", "arguments": {"expression": "1" * (16 << 20)}}
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": huge})
        refused = answer()
        assert refused["id"] == 2 and refused["result"]["isError"]
        assert "was not run; the episode goes on" in refused["result"]["content"][0]["text"]
        send({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
              "params": {"name": "send_message_to_user", "arguments": {"message": "hello"}}})
        after = answer()
        assert after["id"] == 3 and not after["result"]["isError"]
    finally:
        proc.stdin.close()
        proc.wait(60)
