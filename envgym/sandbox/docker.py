"""The docker backend: one container per sandbox, hardened by default, reached over a Unix socket.

The container has no network (`network_mode=none`); the client talks to the server inside through a
Unix socket in a bind-mounted host directory, so no port is published. Defaults: read-only root with
tmpfs /workspace, /tmp and /dev/shm, all capabilities dropped, no-new-privileges, an unprivileged user,
pids/memory/cpu limits (no swap), an init process, and labels the reaper selects on.

The socket directory is the one host path the sandbox can reach. The server needs to write it only while
starting (it unlinks its token file and binds its socket); once it answers, the host takes the directory
back (owned by the host user, mode 0755), so code in the sandbox can neither fill the host's disk through
it nor swap `server.sock` for a link to another socket (the host's docker.sock). Before any client is
handed out, the host checks that `server.sock` is a socket owned by the sandbox user in a directory only
the host can change. tmpfs pages count against the container's memory limit, so the three tmpfs mounts
together leave `_SERVER_RESERVE_MB` of it for processes: filling them ends in ENOSPC, not an OOM kill.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import time
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container, _create_container_args

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
from envgym.sandbox.errors import (
    InvalidRequestError,
    SandboxError,
    SandboxOutOfMemoryError,
    SandboxUnavailableError,
)
from envgym.sandbox.spec import SandboxSpec
from envgym.sandbox.statedir import SocketDir, state_dir

SANDBOX_UID = 1000
LAUNCHER = "/opt/envgym/src/envgym/sandbox/launch.py"
"""The server's entry in the image: it skips envgym/__init__ (see envgym.sandbox.launch), a second of every start.
Run with -S: every package the server needs is on the image's PYTHONPATH, so `site` would only add start-up time."""
_MOUNT = "/run/envgym"
_START_TIMEOUT_S = 60.0
SHM_MB = 16
"""/dev/shm, a tmpfs too (Docker's default is 64 MiB)."""
SERVER_RESERVE_MB = 64
"""Memory kept free of tmpfs for the server and commands: the server alone takes about 30 MiB."""
DEFAULT_DISK_MB = 256
"""/workspace and /tmp each, when the spec does not say and the memory limit leaves room."""


def tmpfs_mb(spec: SandboxSpec) -> int:
    """The size of /workspace and of /tmp: the spec's `disk_mb`, or when it gave none, what fits.

    All tmpfs pages are charged to the container's memory, so 2 x disk + /dev/shm + the reserve must fit
    `memory_mb`. A `disk_mb` the spec sets explicitly and that does not fit is refused, never shrunk.
    """
    room = (spec.memory_mb - SHM_MB - SERVER_RESERVE_MB) // 2
    if "disk_mb" not in spec.model_fields_set:
        if room < 1:
            raise InvalidRequestError(
                f"memory_mb: {spec.memory_mb} MiB leaves no room for /workspace and /tmp (tmpfs, counted as "
                f"memory) after {SHM_MB} MiB /dev/shm and {SERVER_RESERVE_MB} MiB for processes"
            )
        return min(DEFAULT_DISK_MB, room)
    if spec.disk_mb > room:
        raise InvalidRequestError(
            f"disk_mb: the docker backend keeps /workspace and /tmp in memory (tmpfs); 2 x {spec.disk_mb} MiB "
            f"+ {SHM_MB} MiB /dev/shm + {SERVER_RESERVE_MB} MiB for processes exceeds memory_mb={spec.memory_mb}; "
            f"use disk_mb <= {max(room, 0)} or raise memory_mb"
        )
    return spec.disk_mb


def container_kwargs(
    spec: SandboxSpec, sandbox_id: str, host_dir: str, labels: dict[str, str]
) -> dict[str, Any]:
    """Arguments for `containers.run`: the hardened defaults, with the spec's limits."""
    if spec.network != "none":
        raise ValueError(
            f"network: the docker backend runs sandboxes with no network; got the allow-list {spec.network!r}"
        )
    command = [
        "python3", "-S", "-P", LAUNCHER,
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
    tmpfs_opts = f"rw,exec,nosuid,nodev,size={tmpfs_mb(spec)}m"
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
        "shm_size": f"{SHM_MB}m",
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
        kwargs = container_kwargs(spec, sandbox_id, str(host_dir), sandbox_labels(spec, sandbox_id, run_id))
        host_dir.mkdir(mode=0o700)
        token = secrets.token_urlsafe(24)
        (host_dir / "token").write_text(token)
        (host_dir / "token").chmod(0o600)
        for path in (host_dir, host_dir / "token"):
            os.chown(path, SANDBOX_UID, SANDBOX_UID)
        try:
            container = self._run(kwargs)
        except Exception:
            shutil.rmtree(host_dir, ignore_errors=True)
            raise
        started = int(time.time()) - 1
        # Held by descriptor: every reconnect reaches this folder's socket, even if a path is swapped later.
        socket_dir = SocketDir(host_dir)
        client = SandboxClient(
            uds=socket_dir.socket_path,
            token=token,
            diagnose=lambda: self._why_unreachable(container, started, spec),
        )

        def teardown() -> None:
            _remove(container)
            socket_dir.close()
            shutil.rmtree(host_dir, ignore_errors=True)

        sandbox = open_sandbox(
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
        try:
            lock_socket_dir(host_dir)
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _run(self, kwargs: dict[str, Any]) -> Container:
        """`containers.run(**kwargs)` without its inspect between create and start: an engine round trip on every
        cold start, for attributes nobody reads before the first health check. docker-py's own translation of the
        arguments builds the create request, so the container is configured exactly as `run` would."""
        api = self.client.api
        created = api.create_container(**_create_container_args({**kwargs, "version": api._version}))
        container: Container = self.client.containers.prepare_model({"Id": created["Id"], "Name": kwargs["name"]})
        try:
            api.start(created["Id"])
        except BaseException:
            _remove(container)
            raise
        return container

    def _why_unreachable(self, container: Container, since: int, spec: SandboxSpec) -> SandboxError | None:
        """A typed error for a server that stopped answering: out of memory, when the engine says so.

        The container may already be gone (auto-remove), so the engine's event log is asked too.
        """
        killed = False
        try:
            container.reload()
            killed = bool(container.attrs["State"].get("OOMKilled"))
        except NotFound:
            pass
        if not killed:
            events = self.client.events(
                since=since,
                until=int(time.time()) + 1,
                filters={"container": container.id, "event": "oom"},
                decode=True,
            )
            killed = any(True for _ in events)
        if killed:
            return SandboxOutOfMemoryError(
                f"sandbox container {container.name} ran out of memory (memory_mb={spec.memory_mb}, "
                "tmpfs included) and its server was killed"
            )
        return None

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


def lock_socket_dir(host_dir: Path) -> None:
    """Take the socket directory back from the sandbox and check what is in it.

    Called once the server answers: it has unlinked its token and bound its socket, and needs no more
    writes. Owned by this process's user with mode 0755, the directory cannot be filled or changed from the
    sandbox; `server.sock` must then be a real socket of the sandbox user, not a link (to docker.sock, say).
    """
    os.chown(host_dir, os.getuid(), os.getgid())
    os.chmod(host_dir, 0o755)
    check_socket_dir(host_dir)


def check_socket_dir(host_dir: Path) -> None:
    """Refuse a socket directory the sandbox could still change, or a `server.sock` that is not its socket."""
    info = os.lstat(host_dir)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o022:
        raise SandboxUnavailableError(f"{host_dir}: not a directory that only this user can change")
    sock = os.lstat(host_dir / "server.sock")
    if not stat.S_ISSOCK(sock.st_mode) or sock.st_uid != SANDBOX_UID:
        raise SandboxUnavailableError(
            f"{host_dir / 'server.sock'}: not the sandbox server's socket (a link or another file); refusing it"
        )


def _running(container: Container) -> Any:
    """A liveness check for `wait_until_healthy` that asks the engine at most every half second.

    The first question waits half a second too: the container was just started, and an inspect before the first
    health poll only delayed every start."""
    state = {"checked": time.monotonic(), "alive": True}

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
