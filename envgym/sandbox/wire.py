"""The sandbox server's HTTP protocol (v1): request and response bodies, shared by server and client."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envgym.sandbox.limits import EPISODE_LIMITS

PROTOCOL_VERSION = 1


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Health(_Body):
    protocol: int = PROTOCOL_VERSION
    sandbox_id: str
    uptime_s: float
    idle_s: float
    ttl_left_s: float | None = None  # None: no ttl
    features: list[str]


class ExecRequest(_Body):
    """`cmd` as a string runs under `/bin/sh -c`; as a list it is the argv."""

    cmd: str | list[str] = Field(min_length=1)
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    stdin: str | None = None
    timeout_s: float | None = Field(None, gt=0)
    max_output_bytes: int | None = Field(None, ge=1)


class ExecResult(_Body):
    """Outcome of one command. `exit_code` is negative (-signal) when the process was killed."""

    exit_code: int
    stdout: str
    stderr: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class ExecEvent(_Body):
    """One NDJSON line of `/v1/exec/stream`: start (pid), stdout/stderr (data), then exit (result)."""

    type: Literal["start", "stdout", "stderr", "exit"]
    pid: int | None = None
    data: str | None = None
    result: ExecResult | None = None


class SessionCreate(_Body):
    cwd: str | None = None
    env: dict[str, str] = Field(default_factory=dict)


class SessionInfo(_Body):
    session_id: str


class SessionRun(_Body):
    cmd: str = Field(min_length=1)
    timeout_s: float | None = Field(None, gt=0)
    max_output_bytes: int | None = Field(None, ge=1)


class SessionResult(_Body):
    """Output is stdout and stderr interleaved, as a terminal would show it."""

    exit_code: int
    output: str
    truncated: bool = False
    timed_out: bool = False
    duration_s: float = 0.0


class EnvOptions(_Body):
    """What a client may choose about a hosted environment: these `gymnasium.make` keywords and nothing else.

    Loader arguments (`env_dir`, `data`, `world`), models and callables stay the server operator's choice: an
    environment folder is code, so a client naming one would run code of its choosing on the server. Unset fields
    are not passed, so environments that take none of them (CartPole) still work.
    """

    task: str | None = None
    seed: int | None = None
    max_steps: int | None = Field(None, ge=1, le=EPISODE_LIMITS.max_steps)
    failure_rate: float | None = Field(None, ge=0, le=1)
    attack: str | None = None
    guard: bool | None = None
    tool_rewards: bool | None = None
    tool_reward_weight: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _only_allowed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            refused = sorted(str(k) for k in data if k not in cls.model_fields)
            if refused:
                raise ValueError(
                    f"{', '.join(refused)}: not an option a client may choose "
                    f"(allowed: {', '.join(cls.model_fields)})"
                )
        return data

    def make_kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class EnvCreate(_Body):
    env_id: str | None = None
    kwargs: EnvOptions = Field(default_factory=EnvOptions)


class EnvSessionInfo(_Body):
    session_id: str
    env_id: str
    action_space: dict[str, Any]
    observation_space: dict[str, Any]
    metadata: dict[str, Any] = Field(default_factory=dict)
    # Set by a server with worker processes: the port (same host) of the worker holding this session, where the
    # session's later calls go directly. None: this server holds it.
    port: int | None = None


# Info deltas. A tool world's `info` carries the whole conversation and the tool list on every step (5 KB a
# retail step, growing), while a client already holds all of it but the newest messages. A client that asks for
# deltas at reset (`EnvReset.info_delta`) gets an episode number (`EnvResetResult.episode`) and then names, in each
# step, what it holds (`EnvStep.held`); the step's answer carries `info["messages"]` from `messages_from` on only
# and `info["tools"]` as null with `tools_held` when the client's copy stands. The server sends a delta only for an
# environment that declares its info's message list append-only (`info_messages_append_only`) and only while the
# list it sends from is the one the client holds (the same episode and list object); anything else is sent whole
# with a new episode number, so a client that missed an answer (a timeout) is put right by the next one.


class EnvReset(_Body):
    seed: int | None = None
    options: dict[str, Any] | None = None
    info_delta: bool = False


class EnvResetResult(_Body):
    model_config = ConfigDict(extra="forbid", defer_build=True, ser_json_inf_nan="strings")

    observation: Any
    info: dict[str, Any]
    episode: int | None = None  # set when the reset asked for info deltas


class HeldInfo(_Body):
    """What a client holds of its episode's info: the episode number last sent to it and how many messages."""

    episode: int = Field(ge=0)
    messages: int = Field(ge=0)


class EnvStep(_Body):
    action: Any
    held: HeldInfo | None = None


class EnvStepResult(_Body):
    model_config = ConfigDict(extra="forbid", defer_build=True, ser_json_inf_nan="strings")

    observation: Any
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    # Set only in answer to a step that named what it `held`:
    episode: int | None = None
    messages_from: int | None = None  # info["messages"] holds the items from this index on
    tools_held: bool = False  # info["tools"] is null: the client's copy stands


class ErrorBody(_Body):
    type: str
    message: str
