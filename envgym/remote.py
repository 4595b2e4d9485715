"""RemoteEnv: a gymnasium.Env whose episodes run on an env server (`envgym serve`, or a sandbox).

    env = envgym.RemoteEnv("http://127.0.0.1:8100", token_file="/path/printed/by/envgym-serve")
    # or gym.make("envgym/remote-v0", url=..., token_file=...)
    obs, info = env.reset(seed=0)

Each RemoteEnv holds one session on the server; `close()` ends it. Sessions share connections: the RemoteEnvs
of a process borrow a connection to the server for each call from one pool (`envgym.sandbox.clientpool`), so a
process with 16,000 sessions holds a few connections, not 16,000. If the server dies mid-episode,
the next call raises `RemoteEnvError` within `timeout_s`. A server with worker processes (`envgym serve
--workers N`) names the worker's port when the session is created; every later call goes straight to that worker.

`await env.areset()` / `await env.astep(action)` do the same over asyncio HTTP: they never block the event loop,
so one loop can step many sessions at once (`envgym.play.aio.astep_many`). `await env.aclose()` ends the session
from a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
from pydantic_core import from_json

from envgym.sandbox.clientpool import PooledClient
from envgym.sandbox.errors import SandboxError, SandboxUnavailableError
from envgym.sandbox.wire import EnvResetResult, EnvSessionInfo, EnvStepResult
from envgym.spaces import UnsupportedSpaceError, build_space

if TYPE_CHECKING:
    from envgym.sandbox.client import SandboxClient


class RemoteEnvError(RuntimeError):
    """The env server could not be reached, or answered with an error (the message says which)."""


def read_token(path: str) -> str:
    """The bearer token in file `path` (surrounding whitespace removed)."""
    try:
        with open(path) as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise RemoteEnvError(f"token_file {path}: {exc.strerror}") from exc
    if not token:
        raise RemoteEnvError(f"token_file {path}: the file is empty")
    return token


def decode_reset(raw: bytes) -> tuple[Any, dict[str, Any]]:
    """(observation, info) of an `EnvResetResult` body."""
    obs, info, _ = _reset_fields(raw)
    return obs, info


def decode_step(raw: bytes) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """(observation, reward, terminated, truncated, info) of an `EnvStepResult` body (info as sent: a delta's info
    holds only its new messages; `RemoteEnv` puts the rest back)."""
    obs, reward, terminated, truncated, info, _ = _step_fields(raw)
    return obs, reward, terminated, truncated, info


_RESET_KEYS = frozenset(EnvResetResult.model_fields)
_STEP_KEYS = frozenset(EnvStepResult.model_fields)


def _reset_fields(raw: bytes) -> tuple[Any, dict[str, Any], int | None]:
    data = _parsed(raw)
    if (
        data is not None
        and data.keys() <= _RESET_KEYS
        and type(data.get("info")) is dict
        and "observation" in data
        and type(data.get("episode", 0)) is int
    ):
        return data["observation"], data["info"], data.get("episode")
    result = EnvResetResult.model_validate_json(raw)
    return result.observation, result.info, result.episode


def _step_fields(raw: bytes) -> tuple[Any, float, bool, bool, dict[str, Any], dict[str, Any]]:
    """The step's five values and its delta fields (episode, messages_from, tools_held; empty when absent)."""
    data = _parsed(raw)
    if (
        data is not None
        and data.keys() <= _STEP_KEYS
        and type(data.get("reward")) is float
        and type(data.get("terminated")) is bool
        and type(data.get("truncated")) is bool
        and type(data.get("info")) is dict
        and "observation" in data
        and type(data.get("episode", 0)) is int
        and type(data.get("messages_from", 0)) is int
        and type(data.get("tools_held", False)) is bool
    ):
        return data["observation"], data["reward"], data["terminated"], data["truncated"], data["info"], data
    result = EnvStepResult.model_validate_json(raw)
    delta = result.model_dump(include={"episode", "messages_from", "tools_held"}, exclude_none=True)
    return result.observation, result.reward, result.terminated, result.truncated, result.info, delta


def _parsed(raw: bytes) -> dict[str, Any] | None:
    """The body as parsed JSON when it is an object; the callers check the keys and types themselves, and anything
    else (non-finite rewards sent as strings, a malformed body) takes the model's path, which converts what it may
    and names what is wrong. Validating every step through the model cost as much CPU as a retail step."""
    try:
        data = from_json(raw)
    except ValueError:
        return None
    return data if type(data) is dict else None


class _Held:
    """What a session holds of its episode's info for the server's deltas (see envgym.sandbox.wire): the episode
    number, the conversation so far (this client's own list: the caller gets a copy every step) and the tools."""

    __slots__ = ("episode", "messages", "tools")

    def __init__(self, episode: int, messages: list[Any], tools: Any) -> None:
        self.episode, self.messages, self.tools = episode, list(messages), tools


class _Transport(Protocol):
    def request(self, method: str, path: str, body: bytes = b"") -> bytes: ...
    def close(self) -> None: ...


class _SandboxTransport:
    """A sandbox's own client (often over its Unix socket), borrowed: closing the env leaves it open."""

    def __init__(self, client: SandboxClient) -> None:
        self._client = client

    def request(self, method: str, path: str, body: bytes = b"") -> bytes:
        return self._client.request(method, path, content=body or None).content

    def close(self) -> None:
        pass  # it belongs to the sandbox


class RemoteEnv(gym.Env[Any, Any]):
    """One session of an environment served over HTTP.

    Args:
        url: the server, e.g. "http://127.0.0.1:8100".
        env_id: which environment (needed only when the server hosts more than one).
        token: bearer token, when the server requires one.
        token_file: a file holding the token (what `envgym serve` prints), instead of `token`.
        timeout_s: the longest any one call may take before `RemoteEnvError` is raised.
        client: an open client of the server (a sandbox's, see `HttpSandbox.open_env`) instead of url and token.
        **kwargs: options for `gymnasium.make` on the server, from the allow-list in
            `envgym.sandbox.wire.EnvOptions` (task, seed, max_steps, ...); the server refuses any other.
    """

    def __init__(
        self,
        url: str,
        env_id: str | None = None,
        *,
        token: str | None = None,
        token_file: str | None = None,
        timeout_s: float = 30.0,
        client: SandboxClient | None = None,
        **kwargs: Any,
    ) -> None:
        self.url = url
        if token_file is not None:
            if token is not None:
                raise RemoteEnvError("RemoteEnv: give token or token_file, not both")
            token = read_token(token_file)
        self._token, self._timeout_s = token, timeout_s
        self._ask_info_delta = True  # until a server refuses it
        self._held: _Held | None = None
        self._client: _Transport | None
        if client is not None:
            self._client = _SandboxTransport(client)
        else:
            # One retry only: a dead server must surface as an error well within timeout_s.
            try:
                self._client = PooledClient(url, token=token, timeout_s=timeout_s, retries=1)
            except ValueError as exc:
                raise RemoteEnvError(f"RemoteEnv: {exc}") from None
        # Options go as given: the server owns the allow-list and names what it refuses.
        body = {"env_id": env_id, "kwargs": kwargs}
        info = EnvSessionInfo.model_validate_json(self._call("create", "/v1/env/sessions", body))
        self.session_id = info.session_id
        if info.port is not None and isinstance(self._client, PooledClient) and info.port != self._client.port:
            front, self._client = self._client, self._client.with_port(info.port)
            front.close()
        self.env_id = info.env_id
        try:
            self.action_space = build_space(info.action_space)
            self.observation_space = build_space(info.observation_space)
        except UnsupportedSpaceError as exc:
            raise RemoteEnvError(f"RemoteEnv({url}): {exc}") from exc
        self.metadata = {**info.metadata, "render_modes": []}

    def _call(self, what: str, path: str, body: dict[str, Any]) -> bytes:
        if self._client is None:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: the env is closed")
        try:
            return self._client.request("POST", path, json.dumps(body).encode())
        except SandboxUnavailableError as exc:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: env server unreachable: {exc}") from exc
        except SandboxError as exc:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: {type(exc).__name__}: {exc}") from exc

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        path = f"/v1/env/sessions/{self.session_id}/reset"
        try:
            return self._reset_done(self._call("reset", path, self._reset_body(seed, options)))
        except RemoteEnvError as exc:
            if not self._older_server(exc):
                raise
        return self._reset_done(self._call("reset", path, self._reset_body(seed, options)))

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        path = f"/v1/env/sessions/{self.session_id}/step"
        return self._step_done(self._call("step", path, self._step_body(action)))

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Any, dict[str, Any]]:
        """`reset` over asyncio HTTP: the event loop runs other work while the server answers."""
        super().reset(seed=seed)
        path = f"/v1/env/sessions/{self.session_id}/reset"
        try:
            return self._reset_done(await self._acall("reset", path, self._reset_body(seed, options)))
        except RemoteEnvError as exc:
            if not self._older_server(exc):
                raise
        return self._reset_done(await self._acall("reset", path, self._reset_body(seed, options)))

    async def astep(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        """`step` over asyncio HTTP: the event loop runs other work while the server answers."""
        path = f"/v1/env/sessions/{self.session_id}/step"
        return self._step_done(await self._acall("step", path, self._step_body(action)))

    # Info deltas (envgym.sandbox.wire): asked for at every reset, used when the server answers with an episode.
    def _reset_body(self, seed: int | None, options: dict[str, Any] | None) -> dict[str, Any]:
        self._held = None
        body: dict[str, Any] = {"seed": seed, "options": options}
        if self._ask_info_delta:
            body["info_delta"] = True
        return body

    def _older_server(self, exc: RemoteEnvError) -> bool:
        """Whether `exc` is a server without info deltas refusing the request for them (then never ask again)."""
        if self._ask_info_delta and "InvalidRequestError" in str(exc) and "info_delta" in str(exc):
            self._ask_info_delta = False
            return True
        return False

    def _reset_done(self, raw: bytes) -> tuple[Any, dict[str, Any]]:
        obs, info, episode = _reset_fields(raw)
        self._hold(info, episode)
        return obs, info

    def _hold(self, info: dict[str, Any], episode: int | None) -> None:
        messages = info.get("messages")
        self._held = _Held(episode, messages, info.get("tools")) if episode is not None and type(messages) is list else None

    def _step_body(self, action: Any) -> dict[str, Any]:
        held = self._held
        if held is None:
            return {"action": action}
        return {"action": action, "held": {"episode": held.episode, "messages": len(held.messages)}}

    def _step_done(self, raw: bytes) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info, delta = _step_fields(raw)
        episode, start = delta.get("episode"), delta.get("messages_from")
        if start is not None:
            held, messages = self._held, info.get("messages")
            if held is None or held.episode != episode or start != len(held.messages) or type(messages) is not list:
                self._held = None
                raise RemoteEnvError(
                    f"RemoteEnv({self.url}).step: the server sent the messages from {start} on, which do not extend "
                    "the ones this client holds; reset the env"
                )
            held.messages += messages
            info["messages"] = list(held.messages)
            if delta.get("tools_held"):
                info["tools"] = held.tools
        else:
            self._hold(info, episode)
        return obs, reward, terminated, truncated, info

    async def aclose(self) -> None:
        """`close` from an event loop: ends the session without blocking the loop."""
        if not isinstance(self._client, PooledClient):
            await asyncio.to_thread(self.close)
            return
        client, self._client = self._client, None
        # A server that is gone or already reaped the session leaves nothing to release.
        with contextlib.suppress(SandboxError):
            await client.arequest("DELETE", f"/v1/env/sessions/{self.session_id}")

    async def _acall(self, what: str, path: str, body: dict[str, Any]) -> bytes:
        client = self._client
        if client is None:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: the env is closed")
        if not isinstance(client, PooledClient):
            # A sandbox's own client (often a Unix socket) has no asyncio twin: its call runs on a worker thread.
            return await asyncio.to_thread(self._call, what, path, body)
        try:
            # `client` talks to the session's worker when the server has several.
            return await client.arequest("POST", path, json.dumps(body).encode())
        except SandboxUnavailableError as exc:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: env server unreachable: {exc}") from exc
        except SandboxError as exc:
            raise RemoteEnvError(f"RemoteEnv({self.url}).{what}: {type(exc).__name__}: {exc}") from exc

    def close(self) -> None:
        client, self._client = self._client, None
        if client is None:
            return
        try:
            client.request("DELETE", f"/v1/env/sessions/{self.session_id}")
        except SandboxError:
            pass  # the server is gone or already reaped the session; nothing is left to release
        finally:
            client.close()

