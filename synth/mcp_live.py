"""Live MCP tools that an env may use: a fresh server per episode, over a fresh copy of the server's state.

`EpisodeMCPTools(specs, template)` gives `ToolExecutor(extra=...)` implementations (`envgym.world.live.LiveTool`,
per episode). The first call in a `WorldState` (an episode's, or the copy a reference solution replays on) starts
that state's own server process over its own copy of the `template` folder; `{state}` in the server command or in
one of its environment variables stands for that copy's path (`mcp-server-sqlite --db-path {state}/db.sqlite`,
`MEMORY_FILE_PATH={state}/memory.jsonl`). After every call a digest of the copy (leaving out the `exclude` globs,
e.g. timestamped backups) goes into the world state (`envgym.world.live.record_live_state`), so grading sees what
the server changed. Where a folder's bytes cannot say it (a git index holds each copy's inode and change times, so
it is excluded), `probes` read the state back through the server's own read tools (`git_status`): their results
join the digest. Results name the copy as the server's working directory does, `.` (paths under it relative), so
every fresh server gives the same results and every path in them works on the agent's own server. The server stops
and its copy is removed when the state is stopped or collected.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import queue
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envgym.world.live import LiveTool, record_live_state
from envgym.world.spec import ToolCall, ToolSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolError
from synth.mcp_harvest import PLACEHOLDER, HarvestError, LiveMCPTools, names_state, with_state


def directory_digest(root: Path, exclude: Sequence[str] = ()) -> str:
    """sha256 over every file's path (relative, sorted) and bytes and every folder's path (an empty folder a server
    created is state too), leaving out paths matching an `exclude` glob (matched against the relative POSIX path):
    equal folders, equal digests."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if any(fnmatch.fnmatchcase(rel, pattern) for pattern in exclude):
            continue
        if path.is_dir():
            digest.update(rel.encode() + b"/\0")
        elif path.is_file():
            digest.update(rel.encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


Held = tuple[LiveMCPTools, Path, dict[str, ToolSpec]]  # a running server, its state folder, its tools by name


def relative_to_state(value: Any, folder: Path) -> Any:
    """`value` with the state folder's absolute path written as the server's working directory sees it: `.` alone,
    nothing before a path under it (`/tmp/envgym-mcp-x/docs/a.md` -> `docs/a.md`)."""
    if isinstance(value, str):
        for root in dict.fromkeys((str(folder), str(folder.resolve()))):
            value = value.replace(root + "/", "").replace(root, ".")
        return value
    if isinstance(value, list):
        return [relative_to_state(v, folder) for v in value]
    if isinstance(value, dict):
        return {k: relative_to_state(v, folder) for k, v in value.items()}
    return value


def _stop(live: LiveMCPTools, folder: str) -> None:
    live.close()
    shutil.rmtree(folder, ignore_errors=True)


def _drain(pool: queue.Queue[Held], closed: threading.Event, wanted: threading.Event) -> None:
    closed.set()
    wanted.set()
    while not pool.empty():
        live, folder, _ = pool.get_nowait()
        _stop(live, str(folder))


class EpisodeMCPTools:
    """Harvested tools run live on one fresh server per episode (see the module docstring).

    With `pool` > 0 that many servers are kept started ahead of the episodes (a background thread refills the
    pool as episodes take them; `close()` stops the idle ones), so an episode need not wait for a server's start.
    With `state_in_cwd` each server also runs in its state folder, for servers that keep their files in the working
    directory or in memory (the trace check, `require_trace`, then tells the two apart). `probes` are read calls
    whose results join the state digest (see the module docstring). Raises HarvestError when, without
    `state_in_cwd`, no server command or environment variable names `{state}` (every episode would share one server
    state), when `template` is not a folder, or when a probe names no tool of the server.
    """

    def __init__(self, specs: Sequence[ToolSpec], template: str | Path, env: Mapping[str, str] | None = None,
                 timeout_s: float = 60.0, exclude: Sequence[str] = (), state_in_cwd: bool = False, pool: int = 0,
                 probes: Sequence[ToolCall] = ()):
        self.specs = [s for s in specs if (s.source or {}).get("kind") == "mcp"]
        self.env = dict(env or {})
        self.state_in_cwd = state_in_cwd
        for spec in self.specs:
            assert spec.source is not None
            if not state_in_cwd and not names_state(spec.source["server"], self.env):
                raise HarvestError(f"MCP server {' '.join(spec.source['server'])!r} of tool {spec.name!r}: no {PLACEHOLDER} "
                                   "placeholder in its command or environment, so every episode would share one "
                                   "server state; put the state's path in the command or an --env value as "
                                   f"{PLACEHOLDER}")
        self.template = Path(template)
        if not self.template.is_dir():
            raise HarvestError(f"{self.template}: the template of the servers' state must be a folder")
        self.timeout_s = timeout_s
        self.exclude = list(exclude)
        self.probes = list(probes)
        unknown = sorted({p.name for p in self.probes} - {s.name for s in self.specs})
        if unknown:
            raise HarvestError(f"state probe {unknown[0]!r} is no tool of the server (its tools: "
                               f"{', '.join(s.name for s in self.specs)})")
        self._initial_digest = None if self.probes else self.digest(self.template)
        self._key = f"mcp-episode:{id(self)}"
        self.start_times: list[float] = []  # seconds each episode waited for its server (copy, spawn, handshake)
        self.pool = pool
        self._pool: queue.Queue[Held] = queue.Queue()
        self._wanted = threading.Event()
        self._closed = threading.Event()
        self._filler: threading.Thread | None = None
        weakref.finalize(self, _drain, self._pool, self._closed, self._wanted)  # idle pooled servers, at the latest at exit

    def digest(self, folder: Path) -> str:
        """The digest of a state folder's files, less the excluded paths."""
        return directory_digest(folder, self.exclude)

    def state_digest(self, state: WorldState) -> str:
        """The digest grading compares: `state`'s folder digest and, with probes, what they read from its server."""
        live, folder, own = self._episode(state)
        if not self.probes:
            return self.digest(folder)
        read: list[Any] = [self.digest(folder)]
        for probe in self.probes:
            try:
                read.append(relative_to_state(live.call(own[probe.name], dict(probe.arguments)), folder))
            except ToolError as exc:
                read.append({"error": str(exc)})
        return hashlib.sha256(json.dumps(read, sort_keys=True, default=str).encode()).hexdigest()

    @property
    def initial_digest(self) -> str:
        """The digest of a fresh server's state (with probes, read once from a server started for it)."""
        if self._initial_digest is None:
            state = WorldState({})
            try:
                self._initial_digest = self.state_digest(state)
            finally:
                self.stop(state)
        return self._initial_digest

    def _start(self) -> Held:
        """A server started over a fresh copy of the template (not yet bound to any state)."""
        folder = Path(tempfile.mkdtemp(prefix="envgym-mcp-"))
        shutil.copytree(self.template, folder, dirs_exist_ok=True)
        env: dict[str, str] = {}
        specs = []
        for s in self.specs:
            argv, env = with_state((s.source or {})["server"], self.env, folder)
            specs.append(s.model_copy(update={"source": {**(s.source or {}), "server": argv}}))
        # Every server runs in its state folder, so relative paths (a file server's, a todo list's) stay inside it.
        live = LiveMCPTools(specs, timeout_s=self.timeout_s, env=env, cwd=folder)
        try:
            live.__enter__()
        except HarvestError:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return live, folder, {s.name: s for s in specs}

    def _fill(self) -> None:
        # Keeps `pool` servers started ahead of the episodes that will take them; a server that fails to start
        # is not pooled, so the episode starts its own and reports the error.
        while not self._closed.is_set():
            if self._pool.qsize() >= self.pool:
                self._wanted.wait(1.0)
                self._wanted.clear()
                continue
            try:
                held = self._start()
            except HarvestError:
                self._closed.wait(1.0)
                continue
            self._pool.put(held)

    def _take(self) -> Held:
        if self.pool <= 0:
            return self._start()
        if self._filler is None:
            self._filler = threading.Thread(target=self._fill, name="mcp-pool", daemon=True)
            self._filler.start()
        try:
            held = self._pool.get(timeout=self.timeout_s)
        except queue.Empty:
            return self._start()
        self._wanted.set()
        return held

    def close(self) -> None:
        """Stop the pool's idle servers (episodes' servers stop with their states)."""
        self._closed.set()
        self._wanted.set()
        if self._filler is not None:
            self._filler.join(self.timeout_s)
        _drain(self._pool, self._closed, self._wanted)

    def _episode(self, state: WorldState) -> Held:
        held = state.resources.get(self._key)
        if held is None:
            started = time.perf_counter()
            held = self._take()
            self.start_times.append(time.perf_counter() - started)
            state.resources[self._key] = held
            state.resources[f"{self._key}:stop"] = weakref.finalize(state, _stop, held[0], str(held[1]))
        return held

    def folder(self, state: WorldState) -> Path:
        """The state folder of `state`'s server (started if it was not)."""
        return self._episode(state)[1]

    def stop(self, state: WorldState) -> None:
        """Stop `state`'s server and remove its folder now (otherwise done when the state is collected)."""
        stopper = state.resources.pop(f"{self._key}:stop", None)
        state.resources.pop(self._key, None)
        if stopper is not None:
            stopper()

    def call(self, state: WorldState, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
        """Run one tool on this state's server; then record the server state's digest in the world state."""
        live, folder, own = self._episode(state)
        try:
            return relative_to_state(live.call(own[spec.name], arguments), folder)
        finally:
            assert spec.source is not None
            record_live_state(state, str(spec.source.get("server_name", spec.name)), self.state_digest(state),
                              self.initial_digest)

    def require_trace(self, writes: Sequence[ToolCall]) -> None:
        """Run `writes` in order on a fresh server; raise HarvestError naming the first one that leaves the state
        folder's digest as it was: its effect lives in the server's memory, where grading cannot see it."""
        by_name = {s.name: s for s in self.specs}
        state = WorldState({})
        try:
            before = self.initial_digest
            for call in writes:
                self.call(state, by_name[call.name], dict(call.arguments))
                after = self.state_digest(state)
                if after == before:
                    raise HarvestError(
                        f"tool {call.name!r} of {' '.join((by_name[call.name].source or {})['server'])!r} writes but "
                        f"leaves no trace in its state folder ({PLACEHOLDER}): what it changed lives in the server's "
                        "memory, which grading cannot see; keep the server's state in a file under {state}")
                before = after
        finally:
            self.stop(state)

    def functions(self) -> dict[str, Callable[..., Any]]:
        """tool name -> per-episode `LiveTool`, for `ToolExecutor(world, extra=...)`."""
        def bind(spec: ToolSpec) -> LiveTool:
            return LiveTool(lambda state, **arguments: self.call(state, spec, arguments),
                            server=" ".join((spec.source or {})["server"]), per_episode=True)
        return {s.name: bind(s) for s in self.specs}


def live_folder_tools(world: WorldSpec, directory: Path) -> dict[str, Callable[..., Any]]:
    """The per-episode implementations of a live world folder written by `envgym synth run --mcp-server CMD --live`:
    `world.meta["mcp"]["live"]` names the server command, its environment, the digest's exclusions and probes, and
    the folder (inside `directory`) every episode's state starts from."""
    live = world.meta["mcp"]["live"]
    specs = [t.model_copy(update={"source": {**(t.source or {}), "server": list(live["command"])}})
             for t in world.tools if (t.source or {}).get("kind") == "mcp"]
    episodes = EpisodeMCPTools(specs, directory / live["state"], live.get("env") or {}, exclude=live.get("exclude", []),
                               state_in_cwd=bool(live.get("state_in_cwd")),
                               probes=[ToolCall.model_validate(p) for p in live.get("probes", [])])
    return episodes.functions()
