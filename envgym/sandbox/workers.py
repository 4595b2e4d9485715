"""`envgym serve --workers N`: env sessions spread over N worker processes, each session pinned to one worker.

One Python process steps one environment at a time (the GIL), so a server on a many-core machine runs one worker
per core. The front process answers health and creates: it places each new session on the next worker, forwards
the create, and names that worker's port in the answer; RemoteEnv then sends the session's resets and steps straight
to the worker, so the front is off the path of steps. A client that ignores the port still works: the front
forwards its calls to the worker named by the session id's prefix (two hops, slower).

Workers are `envgym serve` processes on the same host, with the same token file (never copied) and each its own
session-id prefix. Each worker reaps its own idle sessions and enforces its share of the session limit. A worker
that exits takes its sessions with it; the front then stops too (`on_exit`), so a supervisor restarts the whole
server rather than clients meeting a half-working one. Workers die with the front, even when it is SIGKILLed: the
kernel sends them SIGTERM (`PR_SET_PDEATHSIG`), and each also stops once its parent is no longer the front.
"""

from __future__ import annotations

import ctypes
import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envgym.sandbox.errors import NotFoundError
from envgym.sandbox.keepalive import KeepAliveClient
from envgym.sandbox.wire import EnvCreate, EnvSessionInfo, HeldInfo

# A create runs gymnasium.make on the worker; its first one also imports the environments.
_FORWARD_TIMEOUT_S = 120.0
_STOP_WAIT_S = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In a worker before exec: SIGTERM when the front dies, even by SIGKILL, so no worker outlives it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


def worker_prefix(index: int) -> str:
    return f"w{index}_"


@dataclass
class Worker:
    """One worker process and idle connections to it (one per concurrent forwarded call, reused)."""

    index: int
    proc: subprocess.Popen[str]
    url: str
    port: int
    token: str | None
    idle: queue.SimpleQueue[KeepAliveClient] = field(default_factory=queue.SimpleQueue)

    def call(self, method: str, path: str, body: bytes = b"") -> bytes:
        try:
            client = self.idle.get_nowait()
        except queue.Empty:
            client = KeepAliveClient(self.url, token=self.token, timeout_s=_FORWARD_TIMEOUT_S)
        try:
            return client.request(method, path, body)
        finally:
            self.idle.put(client)


FRONT_PID_ENV = "ENVGYM_SERVE_FRONT_PID"


def _worker_env() -> dict[str, str]:
    """The parent's environment, with this envgym first on the path (workers run the same code as the front) and the
    front's pid: a worker also stops when its parent is no longer the front (the death signal's fallback)."""
    source = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, FRONT_PID_ENV: str(os.getpid())}


def front_pid() -> int | None:
    """In a worker: the pid of the front that started it (read once, and removed from the environment)."""
    value = os.environ.pop(FRONT_PID_ENV, None)
    return int(value) if value and value.isdigit() else None


def start_workers(
    env_id: str, count: int, *, host: str, token_file: str | None, token: str | None, options: list[str]
) -> list[Worker]:
    """Start `count` workers (`options`: further `envgym serve` flags) and wait until each has told its address."""
    procs = []
    for index in range(count):
        argv = [
            sys.executable, "-m", "envgym.cli", "serve", env_id, "--host", host, "--port", "0", "--json",
            "--session-prefix", worker_prefix(index), *options,
            *(["--token-file", token_file] if token_file else ["--no-auth"]),
        ]  # fmt: skip
        procs.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_worker_env(),
                preexec_fn=_die_with_parent,
            )
        )
    workers = []
    try:
        for index, proc in enumerate(procs):
            assert proc.stdout is not None and proc.stderr is not None
            line = proc.stdout.readline()
            if not line:
                proc.wait(_STOP_WAIT_S)
                raise RuntimeError(
                    f"envgym serve worker {index} exited with code {proc.returncode} before listening: "
                    f"{proc.stderr.read()[-2000:].strip()}"
                )
            url = json.loads(line)["url"]
            threading.Thread(target=_relay, args=(index, proc), daemon=True).start()
            workers.append(Worker(index, proc, url, int(url.rsplit(":", 1)[1]), token))
    except BaseException:
        stop_workers(procs)
        raise
    return workers


def _relay(index: int, proc: subprocess.Popen[str]) -> None:
    """Pass a worker's log lines on (prefixed), except its own start and stop lines, which the front prints."""
    assert proc.stderr is not None
    for line in proc.stderr:
        if not line.startswith("envgym serve:"):
            print(f"worker {index}: {line}", end="", file=sys.stderr, flush=True)


def stop_workers(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class WorkerHost:
    """The front's env sessions (`EnvSessions`): each lives in one of `workers`, named by its id's prefix."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        # Told when a worker exits on its own (the CLI stops the front); set before serving.
        self.on_exit: Callable[[str], None] = lambda why: None
        self._next = itertools.cycle(workers)
        self._lock = threading.Lock()
        self._stopping = False
        for worker in workers:
            threading.Thread(target=self._watch, args=(worker,), daemon=True).start()

    def _watch(self, worker: Worker) -> None:
        code = worker.proc.wait()
        if not self._stopping:
            self.on_exit(f"worker {worker.index} exited with code {code}")

    def _owner(self, session_id: str) -> Worker:
        prefix, sep, _ = session_id.partition("_")
        index = int(prefix[1:]) if sep and prefix[:1] == "w" and prefix[1:].isdigit() else -1
        if not 0 <= index < len(self.workers):
            raise NotFoundError(f"no env session {session_id!r}")
        return self.workers[index]

    def create(self, req: EnvCreate) -> EnvSessionInfo:
        with self._lock:
            worker = next(self._next)
        info = EnvSessionInfo.model_validate_json(
            worker.call("POST", "/v1/env/sessions", req.model_dump_json(exclude_unset=True).encode())
        )
        return info.model_copy(update={"port": worker.port})

    def runs_inline(self, session_id: str) -> bool:
        return False  # a forwarded call waits for its worker

    def reset(
        self, session_id: str, seed: int | None, options: dict[str, Any] | None, info_delta: bool = False
    ) -> bytes:
        body = json.dumps({"seed": seed, "options": options, "info_delta": info_delta}).encode()
        return self._owner(session_id).call("POST", f"/v1/env/sessions/{session_id}/reset", body)

    def step(self, session_id: str, action: Any, held: HeldInfo | None = None) -> bytes:
        body = json.dumps({"action": action, "held": held.model_dump() if held is not None else None}).encode()
        return self._owner(session_id).call("POST", f"/v1/env/sessions/{session_id}/step", body)

    def close(self, session_id: str) -> None:
        self._owner(session_id).call("DELETE", f"/v1/env/sessions/{session_id}")

    def reap_idle(self) -> int:
        return 0  # each worker reaps its own idle sessions

    def close_all(self) -> None:
        self._stopping = True
        stop_workers([w.proc for w in self.workers])
