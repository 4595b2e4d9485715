"""The sandbox server object: what a sandbox can do, independent of how requests reach it.

The HTTP layer (`envgym.sandbox.server`) maps routes onto these methods; the same object runs on the
host (local backend), in a Docker container and in a Kubernetes pod.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator

from envgym.sandbox import files
from envgym.sandbox.errors import NotFoundError
from envgym.sandbox.process import ExecDefaults, ProcessTable, iter_exec, run_exec
from envgym.sandbox.server_env import EnvSessions
from envgym.sandbox.sessions import SessionTable
from envgym.sandbox.wire import ExecEvent, ExecRequest, ExecResult, Health, SessionResult


class SandboxService:
    """Exec, shell sessions, files and (optionally) hosted environments, with a lifetime.

    `exec_enabled=False` gives an env-only server (`envgym serve`, a sandbox server with `--env-id`), which offers
    no exec, sessions, files or archives. `remote_shutdown` lets the owner stop it over HTTP (sandboxes; `envgym
    serve` stops on a signal only, since every client holds its token).
    `scratch` directories (e.g. /tmp) are wiped along with the workspace on `reset`.
    """

    def __init__(
        self,
        sandbox_id: str,
        defaults: ExecDefaults,
        *,
        ttl_s: float | None = None,
        idle_s: float | None = None,
        env_host: EnvSessions | None = None,
        exec_enabled: bool = True,
        remote_shutdown: bool = True,
        scratch: tuple[str, ...] = (),
    ) -> None:
        self.sandbox_id = sandbox_id
        self.defaults = defaults
        self.ttl_s = ttl_s
        self.idle_s = idle_s
        self.env_host = env_host
        self.exec_enabled = exec_enabled
        self.remote_shutdown = remote_shutdown
        self.scratch = scratch
        self.started = time.monotonic()
        self.last_request = self.started
        self.processes = ProcessTable()
        self.sessions = SessionTable(defaults, self.processes)
        self.stopped = threading.Event()
        os.makedirs(defaults.workspace, exist_ok=True)

    def features(self) -> list[str]:
        found = ["exec", "sessions", "files", "archive"] if self.exec_enabled else []
        found += ["env"] if self.env_host is not None else []
        return [*found, "shutdown"] if self.remote_shutdown else found

    def touch(self) -> None:
        self.last_request = time.monotonic()

    def health(self) -> Health:
        now = time.monotonic()
        return Health(
            sandbox_id=self.sandbox_id,
            uptime_s=round(now - self.started, 3),
            idle_s=round(now - self.last_request, 3),
            ttl_left_s=round(self.started + self.ttl_s - now, 3) if self.ttl_s else None,
            features=self.features(),
        )

    def expired(self) -> str | None:
        """Why the server should stop now ("ttl" or "idle"), or None."""
        now = time.monotonic()
        if self.ttl_s is not None and now - self.started > self.ttl_s:
            return "ttl"
        if self.idle_s is not None and now - self.last_request > self.idle_s:
            return "idle"
        return None

    def require(self, feature: str) -> None:
        if feature not in self.features():
            raise NotFoundError(f"this server does not offer {feature!r}; it offers {self.features()}")

    def exec(self, req: ExecRequest) -> ExecResult:
        self.require("exec")
        return run_exec(req, self.defaults, self.processes)

    def exec_stream(self, req: ExecRequest) -> Iterator[ExecEvent]:
        self.require("exec")
        return iter_exec(req, self.defaults, self.processes)

    def session_run(
        self, session_id: str, cmd: str, timeout_s: float | None, cap: int | None
    ) -> SessionResult:
        self.require("sessions")
        return self.sessions.get(session_id).run(
            cmd, timeout_s or self.defaults.timeout_s, cap or self.defaults.max_output_bytes
        )

    def reset(self) -> None:
        """Kill every process and session, and empty the workspace and scratch directories."""
        self.require("exec")
        self.sessions.close_all()
        self.processes.kill_all()
        for directory in (self.defaults.workspace, *self.scratch):
            files.wipe(directory)

    def shutdown(self) -> None:
        self.sessions.close_all()
        self.processes.kill_all()
        if self.env_host is not None:
            self.env_host.close_all()
        self.stopped.set()
