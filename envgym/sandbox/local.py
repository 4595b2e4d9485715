"""The local backend: the sandbox server as a host subprocess in a temporary directory.

Isolation is "none": commands run as the calling user on the host, limited only by rlimits (address
space, file size, and process count where the kernel enforces it for that user). Use it for tests and
trusted code; use the docker backend for untrusted code.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import time
from pathlib import Path

from envgym.sandbox.base import (
    LABEL_EXPIRES_AT,
    LABEL_OWNER,
    LABEL_RUN_ID,
    Isolation,
    owner_is_dead,
    sandbox_labels,
)
from envgym.sandbox.client import HttpSandbox, SandboxClient, open_sandbox
from envgym.sandbox.pidproof import SpawnRecord, record_spawn, still_ours
from envgym.sandbox.process import kill_tree
from envgym.sandbox.spec import SandboxSpec
from envgym.sandbox.statedir import SocketDir, state_dir

__all__ = ["LocalBackend", "rlimits_for", "state_dir"]

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
_START_TIMEOUT_S = 30.0


def rlimits_for(spec: SandboxSpec) -> dict[str, int]:
    return {
        "RLIMIT_AS": spec.memory_mb << 20,
        "RLIMIT_FSIZE": spec.disk_mb << 20,
        "RLIMIT_NPROC": spec.pids,
    }


class LocalBackend:
    """Sandboxes as local subprocesses. Implements `SandboxBackend`."""

    name = "local"
    isolation: Isolation = "none"

    def create(self, spec: SandboxSpec, *, run_id: str | None = None) -> HttpSandbox:
        sandbox_id = secrets.token_hex(6)
        root = state_dir(self.name) / sandbox_id
        (root / "workspace").mkdir(parents=True)
        (root / "tmp").mkdir()
        token = secrets.token_urlsafe(24)
        token_file = root / "token"
        token_file.write_text(token)
        token_file.chmod(0o600)
        socket_path = str(root / "server.sock")
        argv = [
            sys.executable, "-P", str(Path(__file__).with_name("launch.py")),
            "--socket", socket_path,
            "--token-file", str(token_file),
            "--sandbox-id", sandbox_id,
            "--workspace", str(root / "workspace"),
            "--scratch", str(root / "tmp"),
            "--ttl", str(spec.ttl_s),
            "--timeout", str(spec.timeout_s),
            "--max-output", str(spec.max_output_bytes),
            "--rlimits", json.dumps(rlimits_for(spec)),
            "--command-env", json.dumps({"TMPDIR": str(root / "tmp"), **spec.env}),
        ]  # fmt: skip
        if spec.idle_s is not None:
            argv += ["--idle", str(spec.idle_s)]
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [_PACKAGE_PARENT, os.environ.get("PYTHONPATH")])),
        }
        with open(root / "server.log", "wb") as log:
            proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        labels = sandbox_labels(spec, sandbox_id, run_id)
        # The pid with its start time: the reaper kills only the process this proves, never one named by a file.
        spawned = record_spawn(proc.pid) if proc.poll() is None else SpawnRecord(proc.pid, -1)
        (root / "meta.json").write_text(json.dumps({**spawned.to_json(), "labels": labels}))
        # Held by descriptor: every reconnect reaches this folder's socket, even if a path is swapped later.
        socket_dir = SocketDir(root)
        client = SandboxClient(uds=socket_dir.socket_path, token=token)

        def teardown() -> None:
            kill_tree(proc.pid)
            proc.wait()
            socket_dir.close()
            shutil.rmtree(root, ignore_errors=True)

        return open_sandbox(
            sandbox_id=sandbox_id,
            backend=self.name,
            isolation=self.isolation,
            spec=spec,
            client=client,
            teardown=teardown,
            alive=lambda: proc.poll() is None,
            start_timeout_s=_START_TIMEOUT_S,
            what=f"local sandbox {sandbox_id}",
        )

    def reap(self, *, run_id: str | None = None, orphans: bool = True) -> list[str]:
        removed = []
        for root in sorted(state_dir(self.name).iterdir()):
            try:
                meta = json.loads((root / "meta.json").read_text())
            except (OSError, ValueError):
                # A sandbox still starting has no meta.json yet; only sweep ones clearly abandoned.
                if time.time() - root.stat().st_mtime > _START_TIMEOUT_S:
                    shutil.rmtree(root, ignore_errors=True)
                    removed.append(root.name)
                continue
            labels = meta["labels"]
            record = SpawnRecord(int(meta["server_pid"]), int(meta.get("server_start_ticks", -1)))
            server_alive = still_ours(record)
            if (
                not server_alive
                or float(labels[LABEL_EXPIRES_AT]) < time.time()
                or (run_id is not None and labels[LABEL_RUN_ID] == run_id)
                or (orphans and owner_is_dead(labels[LABEL_OWNER]))
            ):
                if server_alive:
                    kill_tree(record.pid)
                shutil.rmtree(root, ignore_errors=True)
                removed.append(root.name)
        return removed

