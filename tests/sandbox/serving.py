"""Starting real servers as subprocesses for tests: `envgym serve` and the in-sandbox server.

Every helper drains the child's stderr on a thread (a full pipe would block the server) and waits generously for
the address line, so a loaded machine slows a test down instead of failing it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_S = 120.0


@dataclass
class Served:
    """A running server: its process, url and (when it requires one) the file holding its token."""

    proc: subprocess.Popen[str]
    url: str
    token_file: str | None
    stderr: list[str] = field(default_factory=list)

    def token(self) -> str:
        assert self.token_file is not None
        return Path(self.token_file).read_text().strip()

    def stop(self, sig: signal.Signals = signal.SIGINT, wait_s: float = 10.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(wait_s)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


def child_env() -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start(argv: list[str], pattern: str, preexec_fn: Callable[[], None] | None = None) -> Served:
    """Start `argv` and wait (bounded) for a stderr line matching `pattern` (groups: url, token file or None)."""
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=child_env(), preexec_fn=preexec_fn)
    assert proc.stderr is not None
    found: list[re.Match[str]] = []
    lines: list[str] = []
    ready = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            match = re.search(pattern, line)
            if match and not found:
                found.append(match)
                ready.set()
        ready.set()

    threading.Thread(target=drain, daemon=True).start()
    ready.wait(STARTUP_S)
    if not found:
        proc.kill()
        proc.wait()
        raise AssertionError(f"{argv[3:5]} did not report its address within {STARTUP_S:g}s: {''.join(lines)}")
    groups = found[0].groups()
    return Served(proc, groups[0], groups[1] if len(groups) > 1 else None, lines)


def start_serve(
    *extra: str, env: str = "calculator", sigint_ignored: bool = False, preexec_fn: Callable[[], None] | None = None
) -> Served:
    """`envgym serve ENV --port 0 ...`. `sigint_ignored` starts it as a CI runner's background job does."""
    argv = [sys.executable, "-m", "envgym.cli", "serve", env, "--port", "0", *extra]
    return start(
        argv,
        r"on (http://\S+) \((?:token file: (\S+)|no auth)\)",
        preexec_fn=_ignore_sigint if sigint_ignored else preexec_fn,
    )
