"""The MCP server over streamable HTTP: the agent's endpoint `/mcp` and the operator's `/admin` routes, each
behind its own bearer token, checked before any body is read.

Operator routes (admin token only):
    GET  /admin/episodes                   every session's episode: task, steps, reward, its components, state hash
    POST /admin/episodes/{session}/reset   {"seed": int | null, "task_id": str | null}: a fresh episode for a session
"""

from __future__ import annotations

import json
import secrets
import socket
from typing import Any

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from envgym.sandbox.limits import MCP_LIMITS
from envgym.serve.mcp_episodes import SESSION_IDLE_TIMEOUT_S, EpisodeBook, UnknownSessionError
from envgym.serve.mcp_server import build_server
from envgym.world.errors import UnknownTaskError

ADMIN_PREFIX = "/admin"
MCP_PATH = "/mcp"


class BearerGate:
    """Refuses a request whose bearer token is not the one its path needs, before its body is read."""

    def __init__(self, app: ASGIApp, *, agent_token: str | None, admin_token: str) -> None:
        self.app = app
        self.agent_token = agent_token
        self.admin_token = admin_token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            admin = str(scope.get("path", "")).startswith(ADMIN_PREFIX)
            needed = self.admin_token if admin else self.agent_token
            if needed is not None and not self._presented(scope, needed):
                what = "the admin token" if admin else "the server's token"
                response = JSONResponse({"error": f"unauthorized: send {what} as 'Authorization: Bearer ...'"},
                                        status_code=401, headers={"Connection": "close"})
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    @staticmethod
    def _presented(scope: Scope, token: str) -> bool:
        for key, value in scope.get("headers", []):
            if key == b"authorization":
                # Compared as bytes: str comparison raises TypeError on non-ASCII (`Bearer éé` answered 500).
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and secrets.compare_digest(given.strip(), token.encode())
        return False


def _admin_routes(book: EpisodeBook) -> list[Route]:
    async def episodes(request: Request) -> Response:
        return JSONResponse({"episodes": book.records()})

    async def reset(request: Request) -> Response:
        try:
            body = json.loads(await request.body() or b"{}")
            seed, task_id = body.get("seed"), body.get("task_id")
            if not (seed is None or isinstance(seed, int)) or not (task_id is None or isinstance(task_id, str)):
                raise ValueError("expected {'seed': int | null, 'task_id': str | null}")
        except (ValueError, AttributeError) as exc:
            return JSONResponse({"error": f"reset: bad body: {exc}"}, status_code=400)
        try:
            episode = await anyio.to_thread.run_sync(
                lambda: book.restart(request.path_params["session"], seed=seed, task_id=task_id))
        except UnknownSessionError as exc:
            return JSONResponse({"error": f"reset: {exc.args[0]}"}, status_code=404)
        except UnknownTaskError as exc:
            return JSONResponse({"error": f"reset: {exc}"}, status_code=400)
        return JSONResponse(episode.record())

    return [
        Route(f"{ADMIN_PREFIX}/episodes", episodes, methods=["GET"]),
        Route(f"{ADMIN_PREFIX}/episodes/{{session}}/reset", reset, methods=["POST"]),
    ]


def build_http_app(book: EpisodeBook, *, host: str, agent_token: str | None, admin_token: str,
                   session_idle_timeout: float = SESSION_IDLE_TIMEOUT_S,
                   max_sessions: int = MCP_LIMITS.max_sessions) -> ASGIApp:
    """The agent's `/mcp` and the operator's `/admin` routes. A session with no request in flight for
    `session_idle_timeout` seconds is ended by the SDK, and its episode dropped; beyond `max_sessions` open sessions
    a new one gets 503 "Too many open sessions" (see `envgym.sandbox.limits.McpLimits`)."""
    server = build_server(book, stdio=False)
    app = server.streamable_http_app(streamable_http_path=MCP_PATH, host=host, session_idle_timeout=session_idle_timeout,
                                     max_sessions=max_sessions, custom_starlette_routes=_admin_routes(book))
    return BearerGate(app, agent_token=agent_token, admin_token=admin_token)


def listen(host: str, port: int) -> socket.socket:
    """A listening socket (port 0 picks a free one), bound before the URL is announced."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    return sock


async def serve_http(app: ASGIApp, sock: socket.socket) -> None:
    import uvicorn

    config: Any = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[sock])
