"""Tools that run live, outside the world state (a harvested MCP server): where they are allowed, and how their
state is graded.

A live tool's effects happen in its server, not in `WorldState`, so an env may use one only if every episode starts
that server from the same state: a fresh server per episode, or a snapshot restored per episode. Otherwise the
episodes, and the hidden replay of the reference solution that computes the target state, share one database: the
replay writes into the agent's world and an agent that does nothing is graded against a target its own state
already matches. `check_live_tools` refuses such an env when it is built.

A per-episode live tool records a digest of its server's state in the table `LIVE_TABLE` (only while it differs
from the state the episode started with), so the canonical state hash, and with it the rubric, covers it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from envgym.world.errors import EnvConfigError
from envgym.world.spec import ToolSpec, WorldSpec
from envgym.world.state import Table, WorldState

LIVE_TABLE = "_live_state"


def is_live(tool: ToolSpec) -> bool:
    """A tool imported from an MCP server with no simulated implementation (no effect, no Python function)."""
    return tool.effect is None and tool.python is None and (tool.source or {}).get("kind") == "mcp"


@dataclass(frozen=True)
class LiveTool:
    """A live tool's implementation, `fn(state, **arguments)`, and whether each episode gets its own server state.

    `per_episode` is the implementation's promise that every `WorldState` (each episode's, and the copy the reference
    solution replays on) reaches a server started from the same initial state, never one another state changed.
    """

    fn: Callable[..., Any]
    server: str
    per_episode: bool

    def __call__(self, state: WorldState, **arguments: Any) -> Any:
        return self.fn(state, **arguments)


def record_live_state(state: WorldState, server: str, digest: str, initial_digest: str) -> None:
    """Put `server`'s state digest in the world state, or take it out when it is back to the initial one (so a state
    that changed nothing hashes like the initial world)."""
    table = state.tables.get(LIVE_TABLE)
    if digest == initial_digest:
        if table is not None:
            table.pop(server, None)
            if not table:
                del state.tables[LIVE_TABLE]
        return
    if table is None:
        table = state.tables[LIVE_TABLE] = Table()
    table[server] = {"server": server, "digest": digest}


def check_live_tools(world: WorldSpec, implementations: Mapping[str, Callable[..., Any]]) -> None:
    """Raise EnvConfigError unless every live tool of `world` has a per-episode implementation (see module doc)."""
    for tool in world.tools:
        if not is_live(tool):
            continue
        server = " ".join((tool.source or {}).get("server", [])) or "?"
        impl = implementations.get(tool.name)
        if isinstance(impl, LiveTool) and impl.per_episode:
            continue
        why = ("has no implementation here" if impl is None else
               "runs on a server shared by every episode, which cannot be reset between episodes")
        raise EnvConfigError(
            f"world {world.name!r}: tool {tool.name!r} runs live on the MCP server {server!r} and {why}: the hidden "
            "replay of each reference solution would write into the agent's server and grading could not see its "
            "state. Give every episode a fresh server (synth.mcp_live.EpisodeMCPTools), or simulate the tool over a "
            "data model (envgym synth run --mcp)")


LIVE_PROVIDERS = "envgym.live_worlds"  # the entry-point group of live-world providers (pyproject.toml)


def live_folder_tools(world: WorldSpec, directory: Any) -> dict[str, Callable[..., Any]]:
    """The per-episode live tools of a folder whose `world.meta` names a live provider (`meta["mcp"]["live"]`).

    Providers are plugins, found by entry point in the group `envgym.live_worlds` under the meta key's name: the
    synthesizer registers `mcp` (a fresh MCP server per episode over a copy of the folder's state), so loading such a
    folder never makes this layer import the synthesizer. A provider is `fn(world, directory) -> {tool: LiveTool}`.
    """
    from importlib.metadata import entry_points

    kinds = [k for k in ("mcp",) if "live" in (world.meta.get(k) or {})]
    if not kinds:
        return {}
    found = {ep.name: ep for ep in entry_points(group=LIVE_PROVIDERS)}
    if kinds[0] not in found:
        raise EnvConfigError(
            f"{world.name}: a live {kinds[0]} world, but no provider for it is installed (entry point group "
            f"{LIVE_PROVIDERS!r}, name {kinds[0]!r}); install envgym with `pip install -e .`")
    provider: Callable[..., dict[str, Callable[..., Any]]] = found[kinds[0]].load()
    return provider(world, directory)
