"""Running commands inside the sandbox: timeouts that kill the whole process tree, capped output.

Every command starts in its own session (process group), so a timeout can kill everything it spawned;
descendants that moved to another group are found through /proc and killed as well.
"""

from __future__ import annotations

import codecs
import contextlib
import ctypes
import os
import resource
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from envgym.sandbox.wire import ExecEvent, ExecRequest, ExecResult

# After a kill, how long to keep draining pipes held open by processes we could not reach.
_DRAIN_AFTER_KILL_S = 1.0
_PR_SET_CHILD_SUBREAPER = 36
_KILL_PASSES = 200


@dataclass
class ExecDefaults:
    """Server-wide defaults and limits applied to every command."""

    workspace: str
    timeout_s: float = 60.0
    max_output_bytes: int = 1 << 20
    env: dict[str, str] = field(default_factory=dict)
    rlimits: dict[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Proc:
    pid: int
    ppid: int
    pgid: int
    zombie: bool


def _processes() -> list[_Proc]:
    """Every process visible in /proc (empty where there is no /proc)."""
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        # The command name may contain spaces and parentheses; fields resume after the last ')'.
        fields = stat[stat.rfind(b")") + 2 :].split()
        found.append(_Proc(int(entry), int(fields[1]), int(fields[2]), fields[0] == b"Z"))
    return found


def descendants(root_pid: int, procs: list[_Proc] | None = None) -> list[int]:
    """Pids of every live descendant of `root_pid`."""
    children: dict[int, list[int]] = {}
    for proc in _processes() if procs is None else procs:
        children.setdefault(proc.ppid, []).append(proc.pid)
    found: list[int] = []
    stack = [root_pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`, its process group and every descendant, including ones that left the group.

    Repeated until nothing is left, because a fork bomb keeps forking between two passes.
    """
    for _ in range(_KILL_PASSES):
        procs = _processes()
        targets = {p.pid for p in procs if p.pgid == pid} | set(descendants(pid, procs)) | {pid}
        live = [p.pid for p in procs if p.pid in targets and not p.zombie]
        if not live:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        for target in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(target, signal.SIGKILL)
        time.sleep(0.005)


class ProcessTable:
    """The commands and shells currently running, so that reset and shutdown can kill them all.

    `lock` is held from spawning a child until it is added, so `reap_orphans` never reaps a child
    that a Popen object still has to wait for.
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._lock = self.lock
        self._pids: set[int] = set()

    def add(self, pid: int) -> None:
        with self._lock:
            self._pids.add(pid)

    def reap_orphans(self) -> None:
        """Collect zombies re-parented to this (subreaper) process; without it they linger forever."""
        me = os.getpid()
        with self._lock:
            for proc in _processes():
                if proc.zombie and proc.ppid == me and proc.pid not in self._pids:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(proc.pid, os.WNOHANG)

    def discard(self, pid: int) -> None:
        with self._lock:
            self._pids.discard(pid)

    def kill_all(self) -> None:
        with self._lock:
            pids = list(self._pids)
            self._pids.clear()
        for pid in pids:
            kill_tree(pid)


def become_subreaper() -> None:
    """Make orphaned descendants re-parent to this process (Linux), so `reap_orphans` can collect them."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def rlimit_setter(rlimits: dict[int, int]) -> Callable[[], None] | None:
    """A preexec function applying `rlimits` in the child, or None when there are none."""
    if not rlimits:
        return None

    def apply() -> None:
        for which, value in rlimits.items():
            resource.setrlimit(which, (value, value))

    return apply


def spawn(
    argv: list[str], *, cwd: str, env: dict[str, str], rlimits: dict[int, int], stdin: bool
) -> subprocess.Popen[bytes]:
    """Start `argv` in a new session with piped output (and piped stdin when `stdin`)."""
    return subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=rlimit_setter(rlimits),
    )


def command_env(defaults: ExecDefaults, extra: dict[str, str]) -> dict[str, str]:
    base = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": defaults.workspace,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
    }
    return {**base, **defaults.env, **extra}


def resolve_cwd(defaults: ExecDefaults, cwd: str | None) -> str:
    return os.path.join(defaults.workspace, cwd) if cwd else defaults.workspace


class _CappedStream:
    """Decodes one pipe incrementally, keeping at most `cap` bytes and noting whether it cut any."""

    def __init__(self, cap: int) -> None:
        self.left = cap
        self.truncated = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, chunk: bytes) -> str:
        if len(chunk) > self.left:
            chunk = chunk[: self.left]
            self.truncated = True
        self.left -= len(chunk)
        return self._decoder.decode(chunk)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def iter_exec(req: ExecRequest, defaults: ExecDefaults, table: ProcessTable) -> Iterator[ExecEvent]:
    """Run one command, yielding start, output chunks as they arrive, and a final exit event.

    The exit event's result has empty stdout/stderr (they were streamed); `run_exec` collects them.
    """
    argv = ["/bin/sh", "-c", req.cmd] if isinstance(req.cmd, str) else list(req.cmd)
    timeout = req.timeout_s or defaults.timeout_s
    cap = req.max_output_bytes or defaults.max_output_bytes
    started = time.monotonic()
    try:
        with table.lock:
            proc = spawn(
                argv,
                cwd=resolve_cwd(defaults, req.cwd),
                env=command_env(defaults, req.env),
                rlimits=defaults.rlimits,
                stdin=req.stdin is not None,
            )
            table.add(proc.pid)
    except (FileNotFoundError, NotADirectoryError, PermissionError) as exc:
        # Same convention as a shell: 127 for "cannot run this", with the reason on stderr.
        yield ExecEvent(type="stderr", data=f"{exc}\n")
        yield ExecEvent(type="exit", result=ExecResult(exit_code=127, stdout="", stderr=""))
        return
    yield ExecEvent(type="start", pid=proc.pid)
    if req.stdin is not None:
        threading.Thread(target=_feed_stdin, args=(proc, req.stdin.encode()), daemon=True).start()
    streams = {"stdout": _CappedStream(cap), "stderr": _CappedStream(cap)}
    timed_out = False
    try:
        with selectors.DefaultSelector() as sel:
            assert proc.stdout is not None and proc.stderr is not None
            sel.register(proc.stdout, selectors.EVENT_READ, "stdout")
            sel.register(proc.stderr, selectors.EVENT_READ, "stderr")
            deadline = started + timeout
            while sel.get_map():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    if timed_out:
                        break
                    timed_out = True
                    kill_tree(proc.pid)
                    deadline = time.monotonic() + _DRAIN_AFTER_KILL_S
                    continue
                for key, _ in sel.select(remaining):
                    chunk = os.read(key.fd, 65536)
                    if not chunk:
                        sel.unregister(key.fileobj)
                        continue
                    text = streams[key.data].feed(chunk)
                    if text:
                        yield ExecEvent(type=key.data, data=text)
        for name, stream in streams.items():
            tail = stream.flush()
            if tail:
                yield ExecEvent(type=name, data=tail)
        exit_code = proc.wait()
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
            proc.wait()
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        table.discard(proc.pid)
        if timed_out:
            table.reap_orphans()
    yield ExecEvent(
        type="exit",
        result=ExecResult(
            exit_code=exit_code,
            stdout="",
            stderr="",
            stdout_truncated=streams["stdout"].truncated,
            stderr_truncated=streams["stderr"].truncated,
            timed_out=timed_out,
            duration_s=round(time.monotonic() - started, 4),
        ),
    )


def run_exec(req: ExecRequest, defaults: ExecDefaults, table: ProcessTable) -> ExecResult:
    """Run one command to completion and return its collected output."""
    out: dict[str, list[str]] = {"stdout": [], "stderr": []}
    result: ExecResult | None = None
    for event in iter_exec(req, defaults, table):
        if event.type in out and event.data is not None:
            out[event.type].append(event.data)
        elif event.type == "exit":
            result = event.result
    assert result is not None, "iter_exec always ends with an exit event"
    return result.model_copy(update={"stdout": "".join(out["stdout"]), "stderr": "".join(out["stderr"])})


def _feed_stdin(proc: subprocess.Popen[bytes], data: bytes) -> None:
    assert proc.stdin is not None
    try:
        proc.stdin.write(data)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass
