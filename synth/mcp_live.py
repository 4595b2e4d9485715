"""Live MCP tools that an env may use: a fresh server per episode, over a fresh copy of the server's state.

`EpisodeMCPTools(specs, template)` gives `ToolExecutor(extra=...)` implementations (`envgym.world.live.LiveTool`,
per episode). The first call in a `WorldState` (an episode's, or the copy a reference solution replays on) starts
that state's own server process over its own copy of the `template` folder; `{state}` in the server command stands
for that copy's path (e.g. `mcp-server-sqlite --db-path {state}/db.sqlite`). After every call a digest of the copy
goes into the world state (`envgym.world.live.record_live_state`), so grading sees what the server changed.
The server stops and its copy is removed when the state is closed or collected.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from envgym.world.live import LiveTool, record_live_state
from envgym.world.spec import ToolSpec
from envgym.world.state import WorldState
from synth.mcp_harvest import HarvestError, LiveMCPTools

PLACEHOLDER = "{state}"
Fingerprint = Callable[[Path], str]


def directory_digest(root: Path) -> str:
    """sha256 over every file's path (relative, sorted) and bytes: equal folders, equal digests."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _stop(live: LiveMCPTools, folder: str) -> None:
    live.close()
    shutil.rmtree(folder, ignore_errors=True)


class EpisodeMCPTools:
    """Harvested tools run live on one fresh server per episode (see the module docstring)."""

    def __init__(self, specs: Sequence[ToolSpec], template: str | Path, env: Mapping[str, str] | None = None,
                 timeout_s: float = 60.0, fingerprint: Fingerprint = directory_digest):
        self.specs = [s for s in specs if (s.source or {}).get("kind") == "mcp"]
        for spec in self.specs:
            assert spec.source is not None
            if not any(PLACEHOLDER in arg for arg in spec.source["server"]):
                raise HarvestError(f"MCP server {' '.join(spec.source['server'])!r} of tool {spec.name!r}: its "
                                   f"command has no {PLACEHOLDER} placeholder, so every episode would share one "
                                   "server state; put the state's path in the command as {state}")
        self.template = Path(template)
        if not self.template.is_dir():
            raise HarvestError(f"{self.template}: the template of the servers' state must be a folder")
        self.env = dict(env or {})
        self.timeout_s = timeout_s
        self.fingerprint = fingerprint
        self.initial_digest = fingerprint(self.template)
        self._key = f"mcp-episode:{id(self)}"

    def _episode(self, state: WorldState) -> tuple[LiveMCPTools, Path]:
        held = state.resources.get(self._key)
        if held is None:
            folder = Path(tempfile.mkdtemp(prefix="envgym-mcp-"))
            shutil.copytree(self.template, folder, dirs_exist_ok=True)
            specs = [s.model_copy(update={"source": {**(s.source or {}), "server": [
                a.replace(PLACEHOLDER, str(folder)) for a in (s.source or {})["server"]]}}) for s in self.specs]
            live = LiveMCPTools(specs, timeout_s=self.timeout_s, env=self.env)
            try:
                live.__enter__()
            except HarvestError:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            held = state.resources[self._key] = (live, folder, {s.name: s for s in specs})
            state.resources[f"{self._key}:stop"] = weakref.finalize(state, _stop, live, str(folder))
        return held[0], held[1]

    def call(self, state: WorldState, spec: ToolSpec, arguments: dict[str, Any]) -> Any:
        """Run one tool on this state's server; then record the server state's digest in the world state."""
        live, folder = self._episode(state)
        own = state.resources[self._key][2][spec.name]
        try:
            return live.call(own, arguments)
        finally:
            assert spec.source is not None
            record_live_state(state, str(spec.source.get("server_name", spec.name)), self.fingerprint(folder),
                              self.initial_digest)

    def functions(self) -> dict[str, Callable[..., Any]]:
        """tool name -> per-episode `LiveTool`, for `ToolExecutor(world, extra=...)`."""
        def bind(spec: ToolSpec) -> LiveTool:
            return LiveTool(lambda state, **arguments: self.call(state, spec, arguments),
                            server=" ".join((spec.source or {})["server"]), per_episode=True)
        return {s.name: bind(s) for s in self.specs}
