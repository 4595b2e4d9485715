"""Stage 2a, MCP harvest: import the tools of real MCP servers (stdio, official SDK) as world tool specs.

`harvest(["mcp-server-time", ...])` starts each server, lists its tools and returns `ToolSpec`s with the input
schema as parameters, MCP annotations mapped to labels, and `source = {"kind": "mcp", "server": argv, "tool":
name}`. `LiveMCPTools` keeps the servers running and yields `fn(state, **args)` functions for
`ToolExecutor(extra=...)`, so harvested tools run live through their server.
"""

from __future__ import annotations

import ast
import asyncio
import concurrent.futures
import contextlib
import json
import logging
import re
import shlex
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio
from mcp import Client, StdioServerParameters
from mcp import types as mcp_types
from mcp.client.stdio import stdio_client
from pydantic import ValidationError

from envgym.world.spec import ToolLabel, ToolSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolError
from envgym.world.validate import SchemaError, compile_validator

PLACEHOLDER = "{state}"


class HarvestError(RuntimeError):
    """A server could not be started or listed; the message names the server command."""


def server_argv(command: str | Sequence[str]) -> list[str]:
    """A server command as argv: a shell-style string ("mcp-server-git --repository .") or a list."""
    argv = shlex.split(command) if isinstance(command, str) else list(command)
    if not argv:
        raise HarvestError("empty MCP server command")
    return argv


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """`KEY=VALUE` strings (the CLI's `--env`) as a dict; a pair without `=` or with an empty key is a HarvestError."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise HarvestError(f"--env {pair!r}: expected KEY=VALUE")
        env[key] = value
    return env


class ServerWatch:
    """What a starting server did wrong: its stderr (kept in a temporary file) and the first stdout line that is
    not JSON-RPC. `cause(exc)` turns the SDK's error (often an ExceptionGroup around "Connection closed") into one
    line saying what the server did."""

    def __init__(self) -> None:
        self.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed by close())
        self.bad_line: str | None = None
        self.scope: anyio.CancelScope | None = None

    async def on_message(self, message: object) -> None:
        # The SDK hands transport faults (a stdout line that is not JSON-RPC) to this handler and otherwise waits for
        # an answer that never comes: stop listing at once.
        if isinstance(message, ValidationError) and self.bad_line is None:
            errors = message.errors()
            self.bad_line = str(errors[0].get("input", "")) if errors else str(message)
            if self.scope is not None:
                self.scope.cancel()

    def stderr_tail(self, lines: int = 3) -> str:
        self.stderr.flush()
        self.stderr.seek(0)
        text = [line.strip() for line in self.stderr.read().splitlines() if line.strip()]
        return " | ".join(text[-lines:])

    def cause(self, exc: BaseException | None) -> str:
        if self.bad_line is not None:
            return f"printed a line that is not JSON-RPC on stdout: {self.bad_line[:200]!r}"
        leaf = _leaf(exc) if exc is not None else None
        tail = self.stderr_tail()
        if isinstance(leaf, TimeoutError):
            return "did not answer the MCP handshake in time" + (f" (stderr: {tail})" if tail else "")
        if isinstance(leaf, OSError):
            return f"cannot start: {leaf}"
        what = f"exited or closed its stdout ({type(leaf).__name__}: {leaf})" if leaf is not None else "failed"
        return f"{what}; stderr: {tail}" if tail else f"{what}; it wrote nothing on stderr"

    def close(self) -> None:
        self.stderr.close()


def _leaf(exc: BaseException) -> BaseException:
    """The first non-group exception inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@contextlib.contextmanager
def _quiet_sdk() -> Iterator[None]:
    """The SDK logs a traceback for every stdout line it cannot parse; our error names the line instead."""
    log = logging.getLogger("mcp.client.stdio")
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


def _client(argv: list[str], env: Mapping[str, str] | None, watch: ServerWatch, cwd: str | None = None) -> Client:
    # Extra variables are merged over the SDK's safe default (HOME, PATH, SHELL, TERM, ...), nothing else leaks in.
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=dict(env) if env else None, cwd=cwd)
    return Client(stdio_client(params, errlog=watch.stderr), message_handler=watch.on_message)


def labels_from_annotations(annotations: mcp_types.ToolAnnotations | None) -> list[ToolLabel]:
    """MCP hints as guard labels: read-only, destructive, and open-world (reads untrusted data; egress if it writes).

    Hints are the server's claims, not guarantees; they only set labels, never skip a check.
    """
    if annotations is None:
        return []
    labels: list[ToolLabel] = []
    read_only = bool(annotations.read_only_hint)
    if read_only:
        labels.append("read_only")
    elif annotations.destructive_hint:
        labels.append("destructive")
    if annotations.open_world_hint:
        labels.append("reads_untrusted")
        if not read_only:
            labels.append("egress")
    return labels


def _safe_name(name: str, taken: set[str], prefix: str) -> str:
    base = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not re.match(r"[A-Za-z_]", base):
        base = f"_{base}"
    candidate = base[:64]
    if candidate in taken:
        candidate = f"{re.sub(r'[^A-Za-z0-9_]', '_', prefix)}_{base}"[:64]
    n = 2
    while candidate in taken:
        candidate = f"{base[:60]}_{n}"
        n += 1
    taken.add(candidate)
    return candidate


def tool_spec(tool: mcp_types.Tool, argv: list[str], server_name: str, taken: set[str]) -> ToolSpec:
    """One MCP tool as a ToolSpec; raises SchemaError if its input schema is not a well-formed object schema."""
    parameters = dict(tool.input_schema or {"type": "object"})
    parameters.setdefault("type", "object")
    try:
        compile_validator(parameters)
    except SchemaError as exc:
        raise SchemaError(f"MCP tool {tool.name!r} of {' '.join(argv)}: {exc}") from exc
    source: dict[str, Any] = {"kind": "mcp", "server": argv, "server_name": server_name, "tool": tool.name}
    if tool.annotations is not None:
        source["annotations"] = tool.annotations.model_dump(mode="json", exclude_none=True)
    if tool.output_schema is not None:
        source["output_schema"] = tool.output_schema
    return ToolSpec(name=_safe_name(tool.name, taken, server_name), description=tool.description or tool.title or
                    tool.name, parameters=parameters, labels=labels_from_annotations(tool.annotations), source=source)


async def _list_tools(argv: list[str], env: Mapping[str, str] | None, timeout_s: float,
                      watch: ServerWatch) -> tuple[str, list[mcp_types.Tool]]:
    tools: list[mcp_types.Tool] = []
    name = argv[0]
    with anyio.fail_after(timeout_s), anyio.CancelScope() as scope:
        watch.scope = scope
        async with _client(argv, env, watch) as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor)
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            info = client.server_info
            name = info.name if info is not None else argv[0]
    if watch.bad_line is not None:
        raise HarvestError(watch.cause(None))
    return name, tools


def list_server_tools(command: str | Sequence[str], env: Mapping[str, str] | None = None,
                      timeout_s: float = 60.0) -> tuple[str, list[mcp_types.Tool]]:
    """(server name, tools) of one server; any failure is one HarvestError naming the command and the cause."""
    argv = server_argv(command)
    watch = ServerWatch()
    try:
        with _quiet_sdk():
            return anyio.run(_list_tools, argv, env, timeout_s, watch)
    except HarvestError as exc:
        raise HarvestError(f"MCP server {' '.join(argv)!r}: {exc}") from None
    except Exception as exc:  # the SDK raises ExceptionGroups of transport errors: say what the server did
        raise HarvestError(f"MCP server {' '.join(argv)!r}: {watch.cause(exc)}") from None
    finally:
        watch.close()


def with_state(argv: Sequence[str], env: Mapping[str, str] | None, folder: str | Path) -> tuple[
        list[str], dict[str, str]]:
    """The command line and environment with every `{state}` replaced by `folder` (a server's own state folder)."""
    path = str(folder)
    return ([a.replace(PLACEHOLDER, path) for a in argv],
            {k: v.replace(PLACEHOLDER, path) for k, v in (env or {}).items()})


def names_state(argv: Sequence[str], env: Mapping[str, str] | None) -> bool:
    """Whether the command line or an environment variable holds the `{state}` placeholder."""
    return any(PLACEHOLDER in a for a in argv) or any(PLACEHOLDER in v for v in (env or {}).values())


def harvest(servers: Sequence[str | Sequence[str]], timeout_s: float = 60.0, env: Mapping[str, str] | None = None,
            state_template: str | Path | None = None) -> list[ToolSpec]:
    """Tool specs of every tool of every server, in server order then the server's listing order. `env` holds
    extra environment variables for the servers (only the SDK's safe defaults reach them otherwise).

    A command (or `env` value) holding `{state}` is listed over a throw-away folder (a copy of `state_template`
    when given, else empty) that is removed afterwards; the specs keep the placeholder, never the folder.
    """
    specs: list[ToolSpec] = []
    taken: set[str] = set()
    for command in servers:
        argv = server_argv(command)
        with tempfile.TemporaryDirectory(prefix="envgym-harvest-") as folder:
            if state_template is not None:
                shutil.copytree(state_template, folder, dirs_exist_ok=True)
            run_argv, run_env = with_state(argv, env, folder) if names_state(argv, env) else (argv, dict(env or {}))
            name, tools = list_server_tools(run_argv, run_env, timeout_s)
        specs.extend(tool_spec(t, argv, name, taken) for t in tools)
    return specs


def result_value(result: mcp_types.CallToolResult) -> Any:
    """A tool result as JSON: its structured content if any, else its text parts joined (read as the JSON or Python
    list or dict it spells, when it spells one: mcp-server-sqlite answers `str(rows)`); errors raise ToolError."""
    texts = [c.text for c in result.content if isinstance(c, mcp_types.TextContent)]
    if result.is_error:
        raise ToolError("\n".join(texts) or "the MCP tool reported an error")
    if result.structured_content is not None:
        return result.structured_content
    return _structured("\n".join(texts))


def _structured(text: str) -> Any:
    stripped = text.strip()
    if not stripped.startswith(("[", "{")) or len(stripped) > 200_000:
        return text
    for parse in (json.loads, ast.literal_eval):
        try:
            value = parse(stripped)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if isinstance(value, list | dict):
            return json.loads(json.dumps(value, default=str))  # tuples, bytes and the like as JSON would hold them
    return text


class LiveMCPTools:
    """Running MCP servers for harvested tools, as `ToolExecutor(extra=live.functions())` implementations.

    Owns the server processes: use as a context manager (or call `close()`), which stops every server. The SDK is
    async, so one background event loop holds the sessions and the sync functions submit calls to it.
    """

    def __init__(self, specs: Sequence[ToolSpec], timeout_s: float = 60.0, env: Mapping[str, str] | None = None,
                 cwd: str | Path | None = None):
        self.specs = [s for s in specs if s.source and s.source.get("kind") == "mcp"]
        self.timeout_s = timeout_s
        self.env = dict(env or {})
        self.cwd = None if cwd is None else str(cwd)
        self._watches: dict[tuple[str, ...], ServerWatch] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-live", daemon=True)
        self._clients: dict[tuple[str, ...], Client] = {}
        self._holders: list[concurrent.futures.Future[None]] = []
        self._stop: asyncio.Event | None = None

    def __enter__(self) -> LiveMCPTools:
        self._thread.start()
        self._stop = asyncio.run_coroutine_threadsafe(self._make_event(), self._loop).result()
        for argv in sorted({tuple(s.source["server"]) for s in self.specs if s.source}):
            ready: concurrent.futures.Future[None] = concurrent.futures.Future()
            self._holders.append(asyncio.run_coroutine_threadsafe(self._hold(argv, ready), self._loop))
            try:
                ready.result(self.timeout_s)
            except Exception as exc:
                cause = self._watches[argv].cause(exc)
                self.close()
                raise HarvestError(f"MCP server {' '.join(argv)!r} did not start: {cause}") from None
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @staticmethod
    async def _make_event() -> asyncio.Event:
        return asyncio.Event()

    async def _hold(self, argv: tuple[str, ...], ready: concurrent.futures.Future[None]) -> None:
        assert self._stop is not None
        watch = self._watches[argv] = ServerWatch()
        try:
            async with _client(list(argv), self.env, watch, self.cwd) as client:
                self._clients[argv] = client
                ready.set_result(None)
                await self._stop.wait()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise
        finally:
            self._clients.pop(argv, None)

    def call(self, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
        """Call one harvested tool on its server and return its JSON result (ToolError if the tool failed)."""
        assert spec.source is not None
        client = self._clients.get(tuple(spec.source["server"]))
        if client is None:
            raise ToolError(f"MCP server for {spec.name} is not running")
        future = asyncio.run_coroutine_threadsafe(client.call_tool(spec.source["tool"], arguments), self._loop)
        try:
            return result_value(future.result(self.timeout_s))
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolError(f"{spec.name}: the MCP server did not answer within {self.timeout_s:g}s") from None

    def functions(self) -> dict[str, Callable[..., Any]]:
        """tool name -> fn(state, **args), for `ToolExecutor(world, extra=...)`."""
        def bind(spec: ToolSpec) -> Callable[..., Any]:
            def run(state: WorldState, **arguments: Any) -> Any:
                return self.call(spec, arguments)
            return run
        return {s.name: bind(s) for s in self.specs}

    def close(self) -> None:
        """Stop every server and the background loop; safe to call twice."""
        if not self._thread.is_alive():
            return
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        for holder in self._holders:
            # A server that failed to start has nothing left to stop; its error was raised by __enter__.
            with contextlib.suppress(Exception):
                holder.result(self.timeout_s)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(self.timeout_s)
        self._loop.close()
        for watch in self._watches.values():
            watch.close()
