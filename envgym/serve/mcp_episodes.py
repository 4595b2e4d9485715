"""Episodes behind an MCP server: one envgym episode per MCP session, and the operator's book of them.

The agent reaches an episode only through tool calls (the world's tools and `USER_TOOL`, its turn to the user);
it can neither reset nor grade. The operator (whoever started the server) reads rewards from the book: a JSONL
report file and, over HTTP, the admin routes. A new MCP session is a new episode; the admin routes can also
restart a session's episode on a chosen task and seed. When an MCP session ends (the client closes it, or it
expires idle) its episode is dropped, so a long-running server holds only the open sessions' worlds; a finished
episode's record stays in the report file.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym

from envgym.env import ToolWorldEnv
from envgym.play.tool_turns import USER_TOOL, step_tool_call
from envgym.sandbox.limits import MCP_LIMITS
from envgym.world.spec import ToolSpec

SESSION_IDLE_TIMEOUT_S = MCP_LIMITS.session_idle_timeout_s  # over HTTP, a session without a request this long ends
EPISODE_OVER = "The episode is over; nothing was done. A new MCP session starts a new episode."


class UnknownSessionError(KeyError):
    """The operator named a session that has no episode."""


class McpSetupError(ValueError):
    """The environment cannot be served over MCP as asked (the message names why)."""


def tool_hints(tool: ToolSpec) -> dict[str, bool]:
    """MCP tool annotations from the tool's labels: read-only, destructive (deletes, or labelled so), open world
    (egress: it reaches outside the world)."""
    destructive = "destructive" in tool.labels or (tool.effect is not None and tool.effect.op == "delete")
    return {
        "read_only_hint": tool.read_only,
        "destructive_hint": destructive and not tool.read_only,
        "open_world_hint": "egress" in tool.labels,
    }


@dataclass
class Outcome:
    """What one agent call produced: the text it sees, whether it is an error, and whether this call ended the
    episode."""

    text: str
    is_error: bool = False
    ended: bool = False


@dataclass
class Episode:
    """One MCP session's episode. Calls are serialised: an env is not thread-safe, and a session's calls are
    ordered anyway."""

    session: str
    env: ToolWorldEnv
    seed: int | None
    task_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    steps: int = 0
    done: bool = False
    reward: float | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def call(self, name: str, arguments: dict[str, Any]) -> Outcome:
        """Run one agent call: a world tool through the env's step (guard, per-call labels and all), or
        `USER_TOOL`, the agent's turn to the user."""
        with self.lock:
            if self.done:
                return Outcome(EPISODE_OVER, is_error=True)
            turn = step_tool_call(self.env, name, arguments, f"mcp_{self.steps + 1}")
            self.steps += 1
            if turn.ended:
                self.done, self.reward, self.info = True, turn.reward, turn.info
            return Outcome(turn.text, is_error=turn.is_error, ended=turn.ended)

    def record(self) -> dict[str, Any]:
        """The operator's view: reward, its components and the final state's hash (never shown to the agent)."""
        state = self.env.state
        return {
            "session": self.session,
            "env": self.env.data.name,
            "task_id": self.task_id,
            "seed": self.seed,
            "steps": self.steps,
            "done": self.done,
            "reward": self.reward,
            "reward_components": self.info.get("reward_components", {}),
            "state_hash": state.hash() if state is not None else None,
        }


class EpisodeBook:
    """Every session's episode, keyed by session id; new sessions get the next seed (or the fixed task)."""

    def __init__(self, env_id: str, *, task: str | None = None, seed: int = 0, report: str | Path | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        self.env_id = env_id
        self.task = task
        self.seed = seed
        self.report = Path(report) if report is not None else None
        self._kwargs = env_kwargs or {}
        self._lock = threading.Lock()
        self._episodes: dict[str, Episode] = {}
        self._started = 0
        probe = self._make_env()
        self.world = probe.data.world
        probe.close()
        if any(t.name == USER_TOOL for t in self.world.tools):
            raise McpSetupError(f"{env_id}: a world tool is named {USER_TOOL!r}, the name of the agent's turn to "
                                f"the user over MCP")
        if task is not None:
            probe.data.task(task)  # an unknown task id fails at start, not in the first session

    def _make_env(self) -> ToolWorldEnv:
        env = gym.make(self.env_id, disable_env_checker=True, **self._kwargs).unwrapped
        if not isinstance(env, ToolWorldEnv):
            raise McpSetupError(f"{self.env_id} is not an envgym tool world ({type(env).__name__})")
        return env

    def episode(self, session: str) -> Episode:
        """The session's episode, started on first use."""
        with self._lock:
            found = self._episodes.get(session)
            if found is None:
                seed = self.seed + self._started
                self._started += 1
                found = self._episodes[session] = self._start(session, seed, self.task)
            return found

    def restart(self, session: str, *, seed: int | None, task_id: str | None) -> Episode:
        """The operator's reset: a fresh episode for an open `session` (the agent has no such capability)."""
        with self._lock:
            if session not in self._episodes:
                raise UnknownSessionError(f"no session {session!r} has started an episode")
        episode = self._start(session, seed, task_id or self.task)
        with self._lock:
            old = self._episodes.get(session)
            if old is not None:  # else the session ended meanwhile: its new world would outlive it
                self._episodes[session] = episode
        if old is None:
            episode.env.close()
            raise UnknownSessionError(f"session {session!r} ended")
        old.env.close()
        return episode

    def end(self, session: str) -> None:
        """Drop `session`'s episode (its MCP session is over); waits for a call still running in it."""
        with self._lock:
            episode = self._episodes.pop(session, None)
        if episode is not None:
            with episode.lock:
                episode.env.close()

    def _start(self, session: str, seed: int | None, task_id: str | None) -> Episode:
        env = self._make_env()
        _, info = env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        return Episode(session, env, seed, str(info["task_id"]))

    def first_message(self, session: str) -> str:
        """The system prompt and the user's opening message, which an MCP client shows its model first."""
        messages = self.episode(session).env.messages
        return "\n\n".join(str(m["content"]) for m in messages[:2])

    def records(self) -> list[dict[str, Any]]:
        with self._lock:
            episodes = list(self._episodes.values())
        return [e.record() for e in episodes]

    def finished(self, episode: Episode) -> None:
        """Append the finished episode's record to the report file."""
        if self.report is None:
            return
        with self._lock, self.report.open("a") as sink:
            sink.write(json.dumps(episode.record(), sort_keys=True) + "\n")

    def close(self) -> None:
        with self._lock:
            episodes, self._episodes = list(self._episodes.values()), {}
        for episode in episodes:
            episode.env.close()
