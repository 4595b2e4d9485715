"""`envgym mcp serve ENV`: an envgym environment as an MCP server, on the official `mcp` SDK.

What the agent gets: the world's tools (JSON Schemas; labels as `readOnlyHint`, `destructiveHint`, `openWorldHint`),
`send_message_to_user` (its turn to the simulated user, whose reply is the result) and the `episode` prompt (the
system prompt and the user's opening message). Every call goes through the env's `step`, so the guard, the
per-call checks and the error observations are the same as in-process. What it never gets: a reset, the reward,
the rubric. One world per MCP session: over stdio the process is the session (either era of MCP); over HTTP the
server speaks the initialize-handshake era, whose sessions carry state (the 2026-07-28 era is stateless, so there
`server/discover` advertises no such version and the SDK's client falls back to the handshake). A session's world
lives as long as its MCP connection: when the client closes the session or it expires idle, the episode is dropped.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

import anyio
import mcp_types as types
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from envgym.play.tool_turns import USER_TOOL, USER_TOOL_DESCRIPTION, USER_TOOL_SCHEMA
from envgym.sandbox.limits import MCP_LIMITS
from envgym.serve.mcp_episodes import Episode, EpisodeBook, tool_hints

EPISODE_PROMPT = "episode"
STDIO_SESSION = "stdio"
SESSION_HEADER = "mcp-session-id"
ENDS_EPISODE = "envgym_ends_episode"  # in `Connection.state`: the connection's teardown drops its episode


def _tools(book: EpisodeBook) -> list[types.Tool]:
    tools = [
        types.Tool(
            name=t.name,
            description=t.description,
            input_schema=t.parameters,
            annotations=types.ToolAnnotations(title=t.name, **tool_hints(t)),
        )
        for t in book.world.tools
    ]
    tools.append(types.Tool(
        name=USER_TOOL,
        description=USER_TOOL_DESCRIPTION,
        input_schema=USER_TOOL_SCHEMA,
        annotations=types.ToolAnnotations(title="Message the user", read_only_hint=True, destructive_hint=False,
                                          open_world_hint=False),
    ))
    return tools


def session_key(ctx: ServerRequestContext[Any, Any], stdio: bool) -> str | None:
    """Which episode a request belongs to: the stdio process, or the streamable HTTP session id (None when a
    stateless HTTP request carries none)."""
    if stdio:
        return STDIO_SESSION
    request = ctx.request
    headers = getattr(request, "headers", None)
    return headers.get(SESSION_HEADER) if headers is not None else None


NO_SESSION = (
    "This server keeps one world per MCP session, and this request belongs to none: connect with the "
    "initialize handshake (the mcp SDK's Client does so by default against this server)."
)


def session_episode(book: EpisodeBook, ctx: ServerRequestContext[Any, Any], key: str) -> Episode:
    """The episode of the request's session, started on first use. Over HTTP the session's connection lives as long
    as the MCP session, and its teardown (the client closed the session, it expired idle, the server is stopping)
    drops the episode from the book. Over stdio the process is the session (a 2026-era request is a connection of
    its own there), so the episode stays until the process ends."""
    episode = book.episode(key)
    if key == STDIO_SESSION:
        return episode
    connection = _connection(ctx)
    if connection.session_id != key:
        raise RuntimeError(f"request of MCP session {key!r} arrived on the connection of session "
                           f"{connection.session_id!r}")
    if not connection.state.get(ENDS_EPISODE):
        connection.state[ENDS_EPISODE] = True
        # In a worker thread: ending waits for a call that may still be running in the episode.
        connection.exit_stack.push_async_callback(anyio.to_thread.run_sync, book.end, key)
    return episode


def _connection(ctx: ServerRequestContext[Any, Any]) -> Connection:
    """The request's `Connection`, whose `exit_stack` the SDK unwinds when the connection ends. The lowlevel handler
    context of mcp 2.3 reaches it only through its session (the SDK's pending Context rework exposes it as
    `ctx.connection`); tests/serve/test_mcp_server.py checks that sessions' episodes are dropped on the pinned SDK."""
    connection = getattr(ctx, "connection", None) or getattr(ctx.session, "_connection", None)
    if not isinstance(connection, Connection):
        raise RuntimeError(f"this mcp SDK ({type(ctx).__module__}) does not expose a request's connection, so a "
                           f"session's episode could not be dropped when it ends; use the pinned mcp version")
    return connection


def build_server(book: EpisodeBook, *, stdio: bool) -> Server[Any]:
    """The MCP server over `book`'s episodes."""
    tools = _tools(book)
    known = {t.name for t in tools}

    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        key = session_key(ctx, stdio)
        if key is None:
            return _text(NO_SESSION, error=True)
        if stdio and params.name == OVERSIZED_TOOL:
            size = (params.arguments or {}).get("bytes")
            return _text(f"this request was over the {MCP_LIMITS.max_stdio_line_bytes} byte limit for one message "
                         f"(at least {size} bytes) and was not run; the episode goes on: send a smaller call",
                         error=True)
        if params.name not in known:
            return _text(f"unknown tool {params.name!r}; the tools are: {', '.join(sorted(known))}", error=True)
        episode = session_episode(book, ctx, key)
        arguments = dict(params.arguments or {})
        # The env is synchronous; a worker thread keeps the event loop (and other sessions) moving.
        outcome = await anyio.to_thread.run_sync(episode.call, params.name, arguments)
        if outcome.ended:
            book.finished(episode)
        return _text(outcome.text, error=outcome.is_error)

    async def list_prompts(ctx: ServerRequestContext[Any, Any],
                           params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=[types.Prompt(
            name=EPISODE_PROMPT, description="This session's task: the system prompt and the user's first message.")])

    async def get_prompt(ctx: ServerRequestContext[Any, Any],
                         params: types.GetPromptRequestParams) -> types.GetPromptResult:
        key = session_key(ctx, stdio)
        if params.name != EPISODE_PROMPT or key is None:
            raise ValueError(f"unknown prompt {params.name!r}" if key else NO_SESSION)
        messages = session_episode(book, ctx, key).env.messages[:2]
        return types.GetPromptResult(messages=[
            types.PromptMessage(role="user", content=types.TextContent(type="text", text=str(m["content"])))
            for m in messages
        ])

    async def discover(ctx: ServerRequestContext[Any, Any], params: types.RequestParams | None) -> types.DiscoverResult:
        return types.DiscoverResult(supported_versions=list(HANDSHAKE_PROTOCOL_VERSIONS),
                                    capabilities=server.get_capabilities(protocol_version=ctx.protocol_version))

    server: Server[Any] = Server(
        f"envgym-{book.world.name}",
        instructions=f"envgym environment {book.world.name}: read the '{EPISODE_PROMPT}' prompt for the task, "
                     f"then use the tools; talk to the user with {USER_TOOL}.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
    )
    if not stdio:
        server.add_request_handler("server/discover", types.RequestParams, discover)
    return server


def _text(text: str, *, error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=error)


async def serve_stdio(book: EpisodeBook, max_line_bytes: int = MCP_LIMITS.max_stdio_line_bytes) -> None:
    """Serve one session over stdin/stdout until the client closes it. Lines longer than `max_line_bytes` are
    never held whole (see `BoundedLines`)."""
    from mcp.server.stdio import stdio_server

    server = build_server(book, stdio=True)
    # The wire is read from a private copy of fd 0, which then points at /dev/null (as the SDK does when it reads
    # stdin itself), so tools' child processes cannot read the client's messages.
    wire = os.dup(0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    try:
        async with stdio_server(stdin=BoundedLines(wire, max_line_bytes)) as (read_stream, write_stream):  # type: ignore[arg-type]
            await server.run(read_stream, write_stream, server.create_initialization_options())
    finally:
        os.dup2(wire, 0)
        os.close(wire)


OVERSIZED_TOOL = "envgym_oversized_request"
"""The tool name an oversized line's request is replaced by: its result says what happened (see `BoundedLines`)."""
_REQUEST_ID = re.compile(rb'"id"\s*:\s*(-?\d{1,18}|"[^"\\]{0,128}")')


class BoundedLines:
    """stdin's lines for the SDK's stdio transport, each at most `max_bytes`.

    A longer line is read through in chunks and dropped. When its first bytes name a request id, the SDK is handed a
    `tools/call` of `OVERSIZED_TOOL` under that id instead, so the client gets an error result for its request (not
    a hang, and not "the conversation has ended": nothing was stepped and the episode goes on)."""

    def __init__(self, fd: int, max_bytes: int) -> None:
        self.fd, self.max_bytes = fd, max_bytes
        self._buffer = bytearray()
        self._eof = False

    def __aiter__(self) -> BoundedLines:
        return self

    async def _read(self) -> bytes:
        return await anyio.to_thread.run_sync(os.read, self.fd, 1 << 16)

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                return line.decode("utf-8", errors="replace")
            if len(self._buffer) > self.max_bytes:
                return await self._skip_oversized()
            if self._eof:
                if self._buffer:
                    line = bytes(self._buffer)
                    self._buffer.clear()
                    return line.decode("utf-8", errors="replace")
                raise StopAsyncIteration
            chunk = await self._read()
            if not chunk:
                self._eof = True
            self._buffer += chunk

    async def _skip_oversized(self) -> str:
        found = _REQUEST_ID.search(bytes(self._buffer[:4096]))
        dropped = len(self._buffer)
        self._buffer.clear()
        while True:
            chunk = await self._read()
            end = chunk.find(b"\n")
            if not chunk or end >= 0:
                dropped += end if end >= 0 else 0
                self._buffer += chunk[end + 1 :] if end >= 0 else b""
                break
            dropped += len(chunk)
        if found is None:
            return "\n"  # a line the SDK refuses as malformed, as it would the original
        params = {"name": OVERSIZED_TOOL, "arguments": {"bytes": dropped, "limit": self.max_bytes}}
        request = {"jsonrpc": "2.0", "id": json.loads(found.group(1)), "method": "tools/call", "params": params}
        return json.dumps(request) + "\n"
