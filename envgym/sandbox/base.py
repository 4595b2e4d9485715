"""The Sandbox and SandboxBackend protocols every backend (local, docker, kubernetes) implements."""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Iterator
from typing import Literal, Protocol, runtime_checkable

from envgym.sandbox.spec import SandboxSpec
from envgym.sandbox.wire import ExecEvent, ExecResult, SessionResult

Isolation = Literal["none", "container", "pod"]

# Labels (Docker labels, Kubernetes labels/annotations) every backend puts on what it creates.
LABEL_MANAGED_BY = "envgym.managed-by"
LABEL_RUN_ID = "envgym.run-id"
LABEL_SANDBOX_ID = "envgym.sandbox-id"
LABEL_CREATED_AT = "envgym.created-at"
LABEL_EXPIRES_AT = "envgym.expires-at"
LABEL_OWNER = "envgym.owner"
MANAGED_BY = "envgym"

_RUN_ID = os.environ.get("ENVGYM_RUN_ID") or uuid.uuid4().hex[:12]


def current_run_id() -> str:
    """This process's run id ($ENVGYM_RUN_ID, else random per process); labels what it creates."""
    return _RUN_ID


def owner_tag() -> str:
    """`host:pid` of this process; the reaper treats a sandbox whose owner is dead as orphaned."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_is_dead(owner: str) -> bool:
    """True when `owner` names a process on this host that no longer exists."""
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def sandbox_labels(spec: SandboxSpec, sandbox_id: str, run_id: str | None) -> dict[str, str]:
    now = time.time()
    return {
        **spec.labels,
        LABEL_MANAGED_BY: MANAGED_BY,
        LABEL_RUN_ID: run_id or current_run_id(),
        LABEL_SANDBOX_ID: sandbox_id,
        LABEL_CREATED_AT: f"{now:.0f}",
        LABEL_EXPIRES_AT: f"{now + spec.ttl_s:.0f}",
        LABEL_OWNER: owner_tag(),
    }


class ShellSessionHandle(Protocol):
    session_id: str

    def run(
        self, cmd: str, *, timeout: float | None = None, max_output: int | None = None
    ) -> SessionResult: ...

    def close(self) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """One isolated box. `close()` is idempotent; every method after it raises SandboxClosedError."""

    id: str
    backend: str
    isolation: Isolation
    spec: SandboxSpec

    def exec(
        self,
        cmd: str | list[str],
        *,
        timeout: float | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
        max_output: int | None = None,
    ) -> ExecResult: ...

    def exec_stream(self, cmd: str | list[str], *, timeout: float | None = None) -> Iterator[ExecEvent]: ...

    def session(self, *, cwd: str | None = None, env: dict[str, str] | None = None) -> ShellSessionHandle: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None: ...

    def put_archive(self, dest: str, tar: bytes) -> None: ...

    def get_archive(self, src: str) -> bytes: ...

    def reset(self) -> None: ...

    def close(self) -> None: ...

    @property
    def closed(self) -> bool: ...


class SandboxBackend(Protocol):
    """Creates sandboxes and sweeps leaked ones. A new backend (e.g. kubernetes) implements this."""

    name: str
    isolation: Isolation

    def create(self, spec: SandboxSpec, *, run_id: str | None = None) -> Sandbox: ...

    def reap(self, *, run_id: str | None = None, orphans: bool = True) -> list[str]:
        """Remove expired sandboxes, those of `run_id` (all of them when given), and (with `orphans`)
        those whose owner process is gone; returns the ids removed."""
        ...


class _OpenSandboxes:
    """Sandboxes not yet closed, closed at interpreter exit (one layer of leak prevention)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: weakref.WeakSet[Sandbox] = weakref.WeakSet()
        atexit.register(self.close_all)

    def add(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._open.add(sandbox)

    def discard(self, sandbox: Sandbox) -> None:
        with self._lock:
            self._open.discard(sandbox)

    def close_all(self) -> None:
        with self._lock:
            boxes = list(self._open)
        for box in boxes:
            # Best effort at exit: a sandbox that cannot be closed now is left to the reaper.
            with contextlib.suppress(Exception):
                box.close()


OPEN_SANDBOXES = _OpenSandboxes()
