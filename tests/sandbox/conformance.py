"""The sandbox conformance suite: behaviour every backend must have, written once.

A backend's test module subclasses `SandboxConformance` and provides a `backend_name` fixture
(a name from `envgym.sandbox.BACKENDS`), e.g.

    class TestKubernetesConformance(SandboxConformance):
        @pytest.fixture(scope="class")
        def backend_name(self) -> str:
            return "kubernetes"
"""

from __future__ import annotations

import io
import os
import random
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox import SandboxBackend, SandboxClosedError, SandboxSpec, get_backend
from envgym.sandbox.base import Sandbox

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_RUN_ID = f"test-{uuid.uuid4().hex[:8]}"
SPEC = SandboxSpec(memory_mb=256, pids=128, ttl_s=300, idle_s=120, timeout_s=20)

_ABANDON = """
import sys, time
from envgym.sandbox import SandboxSpec, get_backend
box = get_backend(sys.argv[1]).create(SandboxSpec(ttl_s=300, idle_s=300), run_id=sys.argv[2])
print(box.id, flush=True)
time.sleep(600)
"""


def start_abandoned_sandbox(backend_name: str, run_id: str) -> str:
    """Start a sandbox from a child process, SIGKILL the child, and return the sandbox id it left."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    child = subprocess.Popen(
        [sys.executable, "-c", _ABANDON, backend_name, run_id], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    sandbox_id = child.stdout.readline().strip()
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert sandbox_id, "the child process did not report a sandbox id"
    return sandbox_id


class SandboxConformance:
    @pytest.fixture(scope="class")
    def backend(self, backend_name: str) -> SandboxBackend:
        return get_backend(backend_name)

    @pytest.fixture(scope="class")
    def box(self, backend: SandboxBackend) -> Iterator[Sandbox]:
        sandbox = backend.create(SPEC, run_id=TEST_RUN_ID)
        yield sandbox
        sandbox.close()

    def test_exit_codes_and_output_are_reported(self, box: Sandbox) -> None:
        result = box.exec("echo out; echo err >&2; exit 7")
        assert (result.exit_code, result.stdout, result.stderr) == (7, "out\n", "err\n")
        assert box.exec(["true"]).exit_code == 0
        assert box.exec(["false"]).exit_code == 1

    def test_missing_program_exits_127(self, box: Sandbox) -> None:
        assert box.exec(["/no/such/program"]).exit_code == 127

    def test_timeout_kills_the_whole_process_tree(self, box: Sandbox) -> None:
        # A duration no other process on the host runs: the local backend shares the host's /proc.
        sleep = f"sleep {300 + random.randrange(1, 10**6) / 10**7:.7f}"
        started = time.monotonic()
        result = box.exec(f"{sleep} & echo $! > bg.pid; sh -c '{sleep}' ; {sleep}", timeout=1)
        assert result.timed_out
        assert time.monotonic() - started < 10
        # A killed process is gone once its parent (the server, or init) has reaped it: allow a moment.
        check = box.exec(
            "for i in $(seq 30); do kill -0 $(cat bg.pid) 2>/dev/null || { echo dead; exit; }; sleep 0.1; done; echo alive"
        )
        assert check.stdout.strip() == "dead"
        assert sleep not in box.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout

    def test_output_over_the_cap_is_cut_and_flagged(self, box: Sandbox) -> None:
        result = box.exec("head -c 100000 /dev/zero | tr '\\0' a", max_output=1000)
        assert result.stdout_truncated and not result.stderr_truncated
        assert result.stdout == "a" * 1000
        assert not box.exec("echo short", max_output=1000).stdout_truncated

    def test_one_megabyte_file_round_trips_byte_for_byte(self, box: Sandbox) -> None:
        data = os.urandom(1 << 20)
        box.write_file("data/blob.bin", data)
        assert box.read_file("data/blob.bin") == data
        assert box.exec("wc -c < data/blob.bin").stdout.strip() == str(1 << 20)

    def test_archive_round_trips_a_directory(self, box: Sandbox) -> None:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, text in {"pkg/a.py": "A = 1\n", "pkg/sub/b.txt": "bee\n"}.items():
                info = tarfile.TarInfo(name)
                info.size = len(text)
                tar.addfile(info, io.BytesIO(text.encode()))
        box.put_archive("proj", buf.getvalue())
        assert box.exec("cat proj/pkg/sub/b.txt").stdout == "bee\n"
        with tarfile.open(fileobj=io.BytesIO(box.get_archive("proj/pkg")), mode="r") as tar:
            assert sorted(tar.getnames()) == ["pkg", "pkg/a.py", "pkg/sub", "pkg/sub/b.txt"]

    def test_session_state_persists_between_calls(self, box: Sandbox) -> None:
        shell = box.session()
        assert shell.run("mkdir -p deep/dir && cd deep/dir && export GREETING=hello").exit_code == 0
        result = shell.run("echo $GREETING from $(basename $PWD); exit_status() { return 3; }; exit_status")
        assert (result.output, result.exit_code) == ("hello from dir\n", 3)
        shell.close()

    def test_session_timeout_keeps_the_shell(self, box: Sandbox) -> None:
        shell = box.session()
        shell.run("X=kept")
        assert shell.run("sleep 300", timeout=1).timed_out
        assert shell.run("echo $X").output == "kept\n"
        shell.close()

    def test_stream_yields_output_before_exit(self, box: Sandbox) -> None:
        events = list(box.exec_stream("echo one; sleep 0.3; echo two"))
        assert events[0].type == "start" and events[-1].type == "exit"
        assert "".join(e.data or "" for e in events if e.type == "stdout") == "one\ntwo\n"
        assert events[-1].result is not None and events[-1].result.exit_code == 0

    def test_reset_empties_the_workspace(self, backend: SandboxBackend) -> None:
        with backend.create(SPEC, run_id=TEST_RUN_ID) as sandbox:  # type: ignore[attr-defined]
            sandbox.write_file("left.txt", "x")
            sandbox.reset()
            assert sandbox.exec("ls -A").stdout == ""

    def test_close_is_idempotent(self, backend: SandboxBackend) -> None:
        sandbox = backend.create(SPEC, run_id=TEST_RUN_ID)
        sandbox.close()
        sandbox.close()
        assert sandbox.closed
        with pytest.raises(SandboxClosedError):
            sandbox.exec("true")

    def test_reap_removes_a_sandbox_whose_client_was_killed(
        self, backend: SandboxBackend, backend_name: str
    ) -> None:
        sandbox_id = start_abandoned_sandbox(backend_name, TEST_RUN_ID)
        assert sandbox_id in backend.reap()
        assert sandbox_id not in backend.reap()
