"""The docker backend: one container per sandbox, hardened by default, reached over a Unix socket.

The container has no network (`network_mode=none`); the client talks to the server inside through a
Unix socket in a bind-mounted host directory, so no port is published. Defaults: read-only root with
tmpfs /workspace and /tmp, all capabilities dropped, no-new-privileges, an unprivileged user,
pids/memory/cpu limits (no swap), an init process, and labels the reaper selects on.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container

from envgym.sandbox.base import (
    LABEL_EXPIRES_AT,
    LABEL_MANAGED_BY,
    LABEL_OWNER,
    LABEL_RUN_ID,
    LABEL_SANDBOX_ID,
    MANAGED_BY,
    Isolation,
    owner_is_dead,
    sandbox_labels,
)
from envgym.sandbox.client import HttpSandbox, SandboxClient, open_sandbox
from envgym.sandbox.local import state_dir
from envgym.sandbox.spec import SandboxSpec

SANDBOX_UID = 1000
_MOUNT = "/run/envgym"
_START_TIMEOUT_S = 60.0


def container_kwargs(
    spec: SandboxSpec, sandbox_id: str, host_dir: str, labels: dict[str, str]
) -> dict[str, Any]:
    """Arguments for `containers.run`: the hardened defaults, with the spec's limits."""
    if spec.network != "none":
        raise ValueError(
            f"network: the docker backend runs sandboxes with no network; got the allow-list {spec.network!r}"
        )
    command = [
        "python3", "-m", "envgym.sandbox.server",
        "--socket", f"{_MOUNT}/server.sock",
        "--token-file", f"{_MOUNT}/token",
        "--sandbox-id", sandbox_id,
        "--workspace", "/workspace",
        "--scratch", "/tmp",
        "--ttl", str(spec.ttl_s),
        "--timeout", str(spec.timeout_s),
        "--max-output", str(spec.max_output_bytes),
    ]  # fmt: skip
    if spec.idle_s is not None:
        command += ["--idle", str(spec.idle_s)]
    tmpfs_opts = f"rw,exec,nosuid,nodev,size={spec.disk_mb}m"
    return {
        "image": spec.image,
        "command": command,
        "name": f"envgym-{sandbox_id}",
        "detach": True,
        "auto_remove": True,
        "init": True,
        "user": f"{SANDBOX_UID}:{SANDBOX_UID}",
        "network_mode": "none",
        "read_only": True,
        "tmpfs": {
            "/workspace": f"{tmpfs_opts},uid={SANDBOX_UID},gid={SANDBOX_UID},mode=0755",
            "/tmp": f"{tmpfs_opts},mode=1777",
        },
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": spec.pids,
        "mem_limit": f"{spec.memory_mb}m",
        "memswap_limit": f"{spec.memory_mb}m",
        "nano_cpus": int(spec.cpu * 1e9),
        "environment": {"HOME": "/workspace", **spec.env},
        "labels": labels,
        "volumes": {host_dir: {"bind": _MOUNT, "mode": "rw"}},
        "stop_signal": "SIGKILL",
    }


class DockerBackend:
    """Sandboxes as Docker containers. Implements `SandboxBackend`."""

    name = "docker"
    isolation: Isolation = "container"

    def __init__(self, client: docker.DockerClient | None = None) -> None:
        self.client = client or docker.from_env(timeout=120)

    def create(self, spec: SandboxSpec, *, run_id: str | None = None) -> HttpSandbox:
        sandbox_id = secrets.token_hex(6)
        host_dir = state_dir(self.name) / sandbox_id
        host_dir.mkdir(mode=0o700)
        token = secrets.token_urlsafe(24)
        (host_dir / "token").write_text(token)
        for path in (host_dir, host_dir / "token"):
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        labels = sandbox_labels(spec, sandbox_id, run_id)
        try:
            container: Container = self.client.containers.run(
                **container_kwargs(spec, sandbox_id, str(host_dir), labels)
            )
        except Exception:
            shutil.rmtree(host_dir, ignore_errors=True)
            raise
        client = SandboxClient(uds=str(host_dir / "server.sock"), token=token)

        def teardown() -> None:
            _remove(container)
            shutil.rmtree(host_dir, ignore_errors=True)

        return open_sandbox(
            sandbox_id=sandbox_id,
            backend=self.name,
            isolation=self.isolation,
            spec=spec,
            client=client,
            teardown=teardown,
            alive=_running(container),
            start_timeout_s=_START_TIMEOUT_S,
            what=f"container {container.name}",
        )

    def list_containers(self, run_id: str | None = None) -> list[Container]:
        selector = [f"{LABEL_MANAGED_BY}={MANAGED_BY}"]
        if run_id is not None:
            selector.append(f"{LABEL_RUN_ID}={run_id}")
        # A non-sparse list inspects each container after listing them all, and one that exits with `--rm` in
        # between raises NotFound: list sparsely, then inspect each one, skipping those already gone.
        found = []
        for sparse in self.client.containers.list(all=True, sparse=True, filters={"label": selector}):
            try:
                found.append(self.client.containers.get(sparse.id))
            except NotFound:
                continue
        return found

    def reap(self, *, run_id: str | None = None, orphans: bool = True) -> list[str]:
        removed = []
        now = time.time()
        for container in self.list_containers():
            labels = container.labels
            if (
                container.status not in ("running", "created", "restarting")
                or float(labels.get(LABEL_EXPIRES_AT, "0")) < now
                or (run_id is not None and labels.get(LABEL_RUN_ID) == run_id)
                or (orphans and owner_is_dead(labels.get(LABEL_OWNER, "")))
            ):
                _remove(container)
                removed.append(labels.get(LABEL_SANDBOX_ID, container.name))
        live = {c.labels.get(LABEL_SANDBOX_ID) for c in self.list_containers()}
        for host_dir in state_dir(self.name).iterdir():
            # A host directory older than a start-up whose container is gone is left over.
            if host_dir.name not in live and now - host_dir.stat().st_mtime > _START_TIMEOUT_S:
                shutil.rmtree(host_dir, ignore_errors=True)
        return removed


def _running(container: Container) -> Any:
    """A liveness check for `wait_until_healthy` that asks the engine at most every half second."""
    state = {"checked": 0.0, "alive": True}

    def alive() -> bool:
        if time.monotonic() - state["checked"] > 0.5:
            state["checked"] = time.monotonic()
            try:
                container.reload()
                state["alive"] = container.status in ("created", "running")
            except NotFound:
                state["alive"] = False
        return bool(state["alive"])

    return alive


def _remove(container: Container) -> None:
    try:
        container.remove(force=True)
    except NotFound:
        pass
    except APIError as exc:
        # "removal already in progress" (auto_remove racing us) means it is going away anyway.
        if "in progress" not in str(exc):
            raise


def docker_available() -> bool:
    """True when a Docker engine answers on this machine."""
    try:
        docker.from_env(timeout=5).ping()
    except Exception:
        return False
    return True
