"""Hosting gymnasium environments behind the sandbox server: many sessions, idle ones reaped.

Resets and steps run on the server's event loop unless their environment waits (`runs_inline`, see
`envgym.sandbox.waits`).

gymnasium and numpy are imported on the first session, not with this module: a sandbox server that never hosts an
environment must start without them (they are most of a cold start's import time).
"""

from __future__ import annotations

import functools
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from pydantic import BaseModel
from pydantic_core import PydanticSerializationError, to_json

from envgym.sandbox.errors import BudgetExceededError, EnvHostError, InvalidRequestError, NotFoundError
from envgym.sandbox.heap import HeapKeeper
from envgym.sandbox.limits import EPISODE_LIMITS, EpisodeLimits
from envgym.sandbox.tools_json import ToolsJSON
from envgym.sandbox.waits import WaitWatch
from envgym.sandbox.wire import EnvCreate, EnvResetResult, EnvSessionInfo, EnvStepResult, HeldInfo

if TYPE_CHECKING:
    import gymnasium as gym

T = TypeVar("T")

# Where a sandbox's uploaded environment folders live, under its workspace (see EnvHost.worlds_dir).
WORLDS_DIR = ".envgym-worlds"


def jsonable(value: Any) -> Any:
    """Convert numpy values (and tuples) inside observations and infos to plain Python types.

    Non-finite floats stay floats: the env result models write them as the strings "Infinity", "-Infinity", "NaN".
    """
    if value is None or type(value) in (str, int, bool):
        return value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    np = sys.modules.get("numpy")  # numpy not loaded: no numpy values to convert
    if np is not None and isinstance(value, np.ndarray):
        return value.tolist()
    if np is not None and isinstance(value, np.generic):
        return value.item()
    return value


@functools.cache
def _field_names(cls: type[BaseModel]) -> tuple[frozenset[str], frozenset[str]]:
    """A result model's field names and its required ones, read from the model once rather than on every step
    (walking `model_fields` cost ~2 us, more than the encoding itself)."""
    fields = cls.model_fields
    return frozenset(fields), frozenset(name for name, f in fields.items() if f.is_required())


def encode_result(cls: type[EnvResetResult] | type[EnvStepResult], **fields: Any) -> bytes:
    """The JSON body of `cls(**fields)`, written by pydantic's serializer from the values as they are (non-finite
    floats as strings, like the model's own config); only when one of them is not plain JSON (numpy) are they
    converted by `jsonable` first. Walking every value in Python on every step (an old way) cost as much as
    retail's whole step, and building the model to dump it cost more than writing the dict."""
    allowed, required = _field_names(cls)
    assert required <= fields.keys() <= allowed, f"{cls.__name__} fields: {sorted(fields)}"
    try:
        return to_json(fields, inf_nan_mode="strings")
    except PydanticSerializationError:
        return to_json({k: jsonable(v) for k, v in fields.items()}, inf_nan_mode="strings")


class EnvSessions(Protocol):
    """What the env routes call: `EnvHost` (sessions in this process) or `WorkerHost` (sessions in workers).

    `reset` and `step` return the response body: the JSON of an `EnvResetResult` / `EnvStepResult`."""

    def create(self, req: EnvCreate) -> EnvSessionInfo: ...
    def runs_inline(self, session_id: str) -> bool: ...
    def reset(
        self, session_id: str, seed: int | None, options: dict[str, Any] | None, info_delta: bool = False
    ) -> bytes: ...
    def step(self, session_id: str, action: Any, held: HeldInfo | None = None) -> bytes: ...
    def close(self, session_id: str) -> None: ...
    def reap_idle(self) -> int: ...
    def close_all(self) -> None: ...


@dataclass
class _EnvSession:
    env: gym.Env[Any, Any]
    env_id: str
    lock: threading.Lock = field(default_factory=threading.Lock)
    last_used: float = field(default_factory=time.monotonic)
    # Info deltas (see envgym.sandbox.wire): the episode number last sent, and the message list and tool list the
    # client was last sent in full (by identity: an append-only list grows in place).
    episode: int = 0
    sent_messages: Any = None
    sent_tools: Any = None
    # What this episode has used of its budgets (`EpisodeLimits`), and the size of the last answer.
    steps: int = 0
    action_bytes: int = 0
    messages: int = 0
    answer_bytes: int = 0
    # The JSON of the tools list resets answer with (envgym.sandbox.tools_json).
    tools_json: ToolsJSON = field(default_factory=ToolsJSON)

    def start_counts(self) -> None:
        self.steps = self.action_bytes = self.messages = 0

    def admit_step(self, action: Any, limits: EpisodeLimits) -> None:
        """Refuse a step past this episode's budgets, before the env sees it."""
        size = len(action) if isinstance(action, str | bytes) else 0
        if self.steps >= limits.max_steps:
            raise BudgetExceededError(f"episode budget: {limits.max_steps} steps taken (max_steps); reset the session")
        if self.messages >= limits.max_messages:
            raise BudgetExceededError(
                f"episode budget: the conversation has {self.messages} messages (max_messages "
                f"{limits.max_messages}); reset the session"
            )
        if self.action_bytes + size > limits.max_action_bytes:
            raise BudgetExceededError(
                f"episode budget: actions would total {self.action_bytes + size} bytes (max_action_bytes "
                f"{limits.max_action_bytes}); reset the session"
            )
        self.steps += 1
        self.action_bytes += size

    def count_messages(self, info: dict[str, Any]) -> None:
        """The conversation's length after a step (the whole list, before any delta cut)."""
        messages = info.get("messages") if isinstance(info, dict) else None
        if isinstance(messages, list):
            self.messages = len(messages)

    def answered(self, body: bytes, limits: EpisodeLimits) -> bytes:
        """Record an answer's size; refuse one over `max_response_bytes`."""
        self.answer_bytes = len(body)
        if len(body) > limits.max_response_bytes:
            raise BudgetExceededError(
                f"response budget: the answer is {len(body)} bytes (max_response_bytes {limits.max_response_bytes}); "
                "send `held` (info deltas) to be sent only the new messages, or reset the session"
            )
        return body

    def sent_whole(self, info: dict[str, Any]) -> int:
        """Record `info` as sent in full; returns its new episode number."""
        self.episode += 1
        self.sent_messages, self.sent_tools = info.get("messages"), info.get("tools")
        return self.episode

    def delta(self, info: dict[str, Any], held: HeldInfo) -> tuple[dict[str, Any], dict[str, Any]]:
        """`info` cut to what a client holding `held` lacks, and the answer's delta fields; `info` whole (and a new
        episode) when the client's copy is not one this session can extend."""
        messages = info.get("messages")
        if (
            held.episode != self.episode
            or type(messages) is not list
            or messages is not self.sent_messages
            or held.messages > len(messages)
            or not getattr(self.env.unwrapped, "info_messages_append_only", False)
        ):
            return info, {"episode": self.sent_whole(info)}
        tools_held = info.get("tools") is self.sent_tools and "tools" in info
        cut = {k: (messages[held.messages :] if k == "messages" else None if k == "tools" and tools_held else v)
               for k, v in info.items()}
        return cut, {"episode": self.episode, "messages_from": held.messages, "tools_held": tools_held}


class EnvHost:
    """Environment sessions by id. `env_id` pins the one environment this host serves (None: any).

    `session_prefix` starts every session id: a worker of `envgym serve --workers N` is told its own, so the front
    process knows from an id alone which worker holds the session.
    """

    episode_limits: EpisodeLimits = EPISODE_LIMITS

    def __init__(
        self,
        env_id: str | None = None,
        idle_s: float = 600.0,
        max_sessions: int = 4096,
        worlds_dir: str | None = None,
        session_prefix: str = "",
        heap: HeapKeeper | None = None,
    ) -> None:
        self.env_id = env_id
        # `envgym serve` hands its sessions' host a HeapKeeper (short collector pauses); in-process hosts keep the
        # collector as it is.
        self.heap = heap
        # A sandbox's own uploads: environment folders the operator put there (`envgym.sandboxed`). Only a full
        # sandbox sets it: whoever holds its token can exec anyway, while an env server never loads a client's path.
        self.worlds_dir = worlds_dir
        self.session_prefix = session_prefix
        self.idle_s = idle_s
        self.max_sessions = max_sessions
        self._lock = threading.Lock()
        self._sessions: dict[str, _EnvSession] = {}
        self._creating = 0
        self._imported = False
        self.waits = WaitWatch(excused=lambda: self._creating > 0)

    def runs_inline(self, session_id: str) -> bool:
        """Whether the session's resets and steps may run on the event loop: its environment has not been caught
        waiting. (An unknown id: yes, its NotFoundError is quick.)"""
        session = self._sessions.get(session_id)
        if session is not None and session.answer_bytes > self.episode_limits.inline_encode_bytes:
            return False  # its next encode is likely large too: keep it off the event loop
        return session is None or self.waits.inline(session.env_id)

    def create(self, req: EnvCreate) -> EnvSessionInfo:
        env_id = req.env_id or self.env_id
        if env_id is None:
            raise InvalidRequestError("env_id: this server hosts no default environment; name one")
        if self.env_id is not None and env_id != self.env_id:
            raise InvalidRequestError(f"env_id: this server serves {self.env_id!r}, not {env_id!r}")
        # The slot is taken before the (slow) make and given back if it fails: a check here and an insert after
        # the make let 56 of 60 simultaneous creates through a limit of 10.
        with self._lock:
            if len(self._sessions) + self._creating >= self.max_sessions:
                raise EnvHostError(f"too many sessions ({self.max_sessions}); close some first")
            self._creating += 1
        try:
            env = self._make(env_id, req.kwargs.make_kwargs())
            session_id = self.session_prefix + secrets.token_hex(8)
            with self._lock:
                self._sessions[session_id] = _EnvSession(env, env_id)
                live = len(self._sessions)
        finally:
            with self._lock:
                self._creating -= 1
        if self.heap is not None:
            self.heap.created(live)
        from envgym.spaces import UnsupportedSpaceError, describe_space

        try:
            action_space, observation_space = describe_space(env.action_space), describe_space(env.observation_space)
        except UnsupportedSpaceError as exc:
            raise EnvHostError(str(exc)) from exc
        return EnvSessionInfo(
            session_id=session_id,
            env_id=env_id,
            action_space=action_space,
            observation_space=observation_space,
            metadata=jsonable({k: v for k, v in env.metadata.items() if k != "render_modes"}),
        )

    def _make(self, env_id: str, kwargs: dict[str, Any]) -> gym.Env[Any, Any]:
        import gymnasium as gym

        if not self._imported:
            # Registered here, not by importing envgym: the in-sandbox server starts without envgym/__init__
            # (see envgym.sandbox.launch).
            from envgym.registry import register_bundled, register_remote

            register_bundled()
            register_remote()
            self._imported = True
        if self.worlds_dir is not None and os.path.isdir(self.worlds_dir):
            from envgym.registry import register_dir

            register_dir(self.worlds_dir, override=True)
        try:
            return gym.make(env_id, **kwargs)
        except Exception as exc:
            raise EnvHostError(
                f"gymnasium.make({env_id!r}, **{sorted(kwargs)}): {type(exc).__name__}: {exc}"
            ) from exc

    def _get(self, session_id: str) -> _EnvSession:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(
                f"no env session {session_id!r} (closed, or reaped after {self.idle_s:g}s idle)"
            )
        session.last_used = time.monotonic()
        return session

    def reset(
        self, session_id: str, seed: int | None, options: dict[str, Any] | None, info_delta: bool = False
    ) -> bytes:
        session = self._get(session_id)

        def reset() -> tuple[Any, dict[str, Any], dict[str, Any]]:
            obs, info = session.env.reset(seed=seed, options=options)
            session.start_counts()
            return obs, info, {"episode": session.sent_whole(info)} if info_delta else {}

        obs, info, fields = self._watched(session, "reset", reset)
        if self.heap is not None:
            self.heap.reset(len(self._sessions))

        def encode(info: dict[str, Any]) -> bytes:
            return encode_result(EnvResetResult, observation=obs, info=info, **fields)

        if type(info) is dict and getattr(session.env.unwrapped, "info_messages_append_only", False):
            body = session.tools_json.encode(info, encode)
        else:
            body = encode(info)
        return session.answered(body, self.episode_limits)

    def step(self, session_id: str, action: Any, held: HeldInfo | None = None) -> bytes:
        session = self._get(session_id)

        def step() -> tuple[Any, Any, Any, Any, dict[str, Any], dict[str, Any]]:
            session.admit_step(action, self.episode_limits)
            obs, reward, terminated, truncated, info = session.env.step(action)
            session.count_messages(info)
            if held is None:
                return obs, reward, terminated, truncated, info, {}
            return obs, reward, terminated, truncated, *session.delta(info, held)

        obs, reward, terminated, truncated, info, fields = self._watched(session, "step", step)
        body = encode_result(
            EnvStepResult,
            observation=obs,
            reward=float(reward),
            terminated=bool(terminated),
            truncated=bool(truncated),
            info=info,
            **fields,
        )
        return session.answered(body, self.episode_limits)

    def _watched(self, session: _EnvSession, what: str, call: Callable[[], T]) -> T:
        """`call()` under the session's lock, watched for waits (`envgym.sandbox.waits`)."""
        with session.lock:
            try:
                return self.waits.call(session.env_id, what, call)
            except BudgetExceededError:
                raise
            except Exception as exc:
                raise EnvHostError(f"{session.env_id}.{what}: {type(exc).__name__}: {exc}") from exc

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise NotFoundError(f"no env session {session_id!r}")
        session.env.close()
        if self.heap is not None:
            self.heap.closed(1, len(self._sessions))

    def reap_idle(self) -> int:
        """Close sessions unused for longer than `idle_s`; returns how many were closed."""
        cutoff = time.monotonic() - self.idle_s
        with self._lock:
            stale = [sid for sid, s in self._sessions.items() if s.last_used < cutoff]
            closed = [self._sessions.pop(sid) for sid in stale]
        for session in closed:
            session.env.close()
        if closed and self.heap is not None:
            self.heap.closed(len(closed), len(self._sessions))
        return len(closed)

    def session_count(self) -> int:
        with self._lock:
            return len(self._sessions)

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            session.env.close()
