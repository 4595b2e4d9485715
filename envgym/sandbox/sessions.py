"""Persistent shell sessions: one bash process per session, so cwd, variables and functions persist.

Each command is followed by a marker line carrying its exit status; output is stdout and stderr
interleaved. A timeout kills the command's processes but keeps the shell (and its state) alive.
"""

from __future__ import annotations

import os
import secrets
import selectors
import subprocess
import threading
import time

from envgym.sandbox.errors import NotFoundError
from envgym.sandbox.process import (
    ExecDefaults,
    ProcessTable,
    command_env,
    descendants,
    kill_tree,
    resolve_cwd,
    rlimit_setter,
)
from envgym.sandbox.wire import SessionResult

# How long a shell may take to report the marker after its command was killed before it is given up.
_MARKER_GRACE_S = 2.0


class ShellSession:
    """One bash process driven through pipes. `run` is serialised per session."""

    def __init__(self, session_id: str, defaults: ExecDefaults, cwd: str | None, env: dict[str, str]) -> None:
        self.session_id = session_id
        self._marker = f"__ENVGYM_DONE_{secrets.token_hex(8)}__".encode()
        self._lock = threading.Lock()
        self.alive = True
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc"],
            cwd=resolve_cwd(defaults, cwd),
            env=command_env(defaults, env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=rlimit_setter(defaults.rlimits),
        )

    def run(self, cmd: str, timeout_s: float, max_output_bytes: int) -> SessionResult:
        with self._lock:
            if not self.alive or self.proc.poll() is not None:
                self.alive = False
                raise NotFoundError(f"session {self.session_id!r} has ended; create a new one")
            started = time.monotonic()
            # The group reads stdin from /dev/null so a command cannot swallow the marker line.
            script = (
                "{\n" + cmd + f"\n}} < /dev/null\nprintf '\\n%s:%s\\n' '{self._marker.decode()}' \"$?\"\n"
            )
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write(script.encode())
                self.proc.stdin.flush()
            except BrokenPipeError as exc:
                self.alive = False
                raise NotFoundError(f"session {self.session_id!r} has ended; create a new one") from exc
            output, truncated, exit_code, timed_out = self._read_until_marker(timeout_s, max_output_bytes)
            return SessionResult(
                exit_code=exit_code,
                output=output.decode("utf-8", errors="replace"),
                truncated=truncated,
                timed_out=timed_out,
                duration_s=round(time.monotonic() - started, 4),
            )

    def _read_until_marker(self, timeout_s: float, cap: int) -> tuple[bytes, bool, int, bool]:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        kept = bytearray()
        pending = bytearray()
        truncated = False
        timed_out = False
        deadline = time.monotonic() + timeout_s
        hold = len(self._marker) + 2  # bytes that might be the start of the marker line
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                at = pending.find(b"\n" + self._marker + b":")
                if at >= 0:
                    end = pending.find(b"\n", at + 1 + len(self._marker))
                    if end >= 0:
                        code = pending[at + 2 + len(self._marker) : end]
                        kept += pending[:at]
                        break
                elif len(pending) > hold:
                    kept += pending[: len(pending) - hold]
                    del pending[: len(pending) - hold]
                if len(kept) > cap:
                    del kept[cap:]
                    truncated = True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if timed_out:
                        self.close()
                        return bytes(kept[:cap]), truncated or len(kept) > cap, -9, True
                    timed_out = True
                    for pid in descendants(self.proc.pid):
                        kill_tree(pid)
                    deadline = time.monotonic() + _MARKER_GRACE_S
                    continue
                if sel.select(remaining):
                    chunk = os.read(fd, 65536)
                    if not chunk:
                        self.alive = False
                        return bytes(kept[:cap]), truncated, -9, timed_out
                    pending += chunk
        if len(kept) > cap:
            del kept[cap:]
            truncated = True
        return bytes(kept), truncated, int(code), timed_out

    def close(self) -> None:
        self.alive = False
        kill_tree(self.proc.pid)
        try:
            self.proc.wait(timeout=5)
        finally:
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()


class SessionTable:
    """Open sessions by id."""

    def __init__(self, defaults: ExecDefaults, table: ProcessTable) -> None:
        self._defaults = defaults
        self._table = table
        self._lock = threading.Lock()
        self._sessions: dict[str, ShellSession] = {}

    def create(self, cwd: str | None, env: dict[str, str]) -> str:
        session_id = secrets.token_hex(6)
        with self._table.lock:
            session = ShellSession(session_id, self._defaults, cwd, env)
            self._table.add(session.proc.pid)
        with self._lock:
            self._sessions[session_id] = session
        return session_id

    def get(self, session_id: str) -> ShellSession:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise NotFoundError(f"no session {session_id!r}; create one with POST /v1/sessions")
        return session

    def close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is None:
            raise NotFoundError(f"no session {session_id!r}")
        self._table.discard(session.proc.pid)
        session.close()

    def close_all(self) -> None:
        with self._lock:
            sessions = list(self._sessions.values())
            self._sessions.clear()
        for session in sessions:
            self._table.discard(session.proc.pid)
            session.close()
