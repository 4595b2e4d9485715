"""The docker backend for real: conformance, hardening defaults, containment, leaks, ttl, warm pool."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox import SandboxSpec
from envgym.sandbox.base import LABEL_RUN_ID, Sandbox
from envgym.sandbox.pool import SandboxPool
from tests.sandbox.conformance import TEST_RUN_ID, SandboxConformance, start_abandoned_sandbox

pytestmark = pytest.mark.docker

docker = pytest.importorskip("docker")


@pytest.fixture(scope="module")
def engine() -> Iterator[object]:
    from envgym.sandbox.docker import docker_available
    from envgym.sandbox.image import ensure_image

    if not docker_available():
        pytest.skip("no Docker engine on this machine (scripts/ci_docker.sh starts one)")
    client = docker.from_env()
    ensure_image(client, quiet=True)
    yield client
    # Whatever these tests started must be gone: closed, or removed by the reaper.
    left = client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={TEST_RUN_ID}"})
    assert not left, f"containers left behind: {[c.name for c in left]}"


@pytest.fixture(scope="module")
def backend(engine: object) -> object:
    from envgym.sandbox.docker import DockerBackend

    return DockerBackend()


class TestDockerConformance(SandboxConformance):
    @pytest.fixture(scope="class")
    def backend_name(self, engine: object) -> str:
        return "docker"


@pytest.fixture(scope="module")
def box(backend: object) -> Iterator[Sandbox]:
    spec = SandboxSpec(memory_mb=128, pids=64, cpu=0.5, ttl_s=300, timeout_s=20)
    sandbox = backend.create(spec, run_id=TEST_RUN_ID)  # type: ignore[attr-defined]
    yield sandbox
    sandbox.close()


def _container(engine: object, box: Sandbox) -> object:
    return engine.containers.get(f"envgym-{box.id}")  # type: ignore[attr-defined]


def test_container_is_hardened_by_default(engine: object, box: Sandbox) -> None:
    attrs = _container(engine, box).attrs  # type: ignore[attr-defined]
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Init"] is True
    assert host["PidsLimit"] == 64
    assert host["Memory"] == host["MemorySwap"] == 128 << 20
    assert host["NanoCpus"] == 500_000_000
    assert set(host["Tmpfs"]) == {"/workspace", "/tmp"}
    assert attrs["Config"]["User"] == "1000:1000"
    labels = attrs["Config"]["Labels"]
    assert labels["envgym.managed-by"] == "envgym" and labels["envgym.run-id"] == TEST_RUN_ID
    assert float(labels["envgym.expires-at"]) - float(labels["envgym.created-at"]) == pytest.approx(
        300, abs=1
    )


def _host_still_works() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0


def test_fork_bomb_is_contained(box: Sandbox) -> None:
    result = box.exec("bomb() { bomb | bomb & }; bomb; sleep 5", timeout=4)
    assert result.timed_out or result.exit_code != 0
    _host_still_works()
    # The sandbox recovers: its processes were killed and reaped, so it can fork again.
    deadline = time.monotonic() + 15
    while box.exec("(true) && echo alive", timeout=30).stdout != "alive\n":
        assert time.monotonic() < deadline, "the sandbox still cannot fork 15s after the fork bomb"
        time.sleep(0.5)


def test_memory_bomb_is_contained(box: Sandbox) -> None:
    result = box.exec("python3 -c 'x = bytearray(1 << 30); print(len(x))'", timeout=20)
    assert result.exit_code != 0 and "1073741824" not in result.stdout
    _host_still_works()
    assert box.exec("echo alive").stdout == "alive\n"


def test_infinite_loop_is_stopped_by_the_timeout(box: Sandbox) -> None:
    started = time.monotonic()
    result = box.exec("python3 -c 'while True: pass'", timeout=1)
    assert result.timed_out and time.monotonic() - started < 10


def test_network_egress_fails(box: Sandbox) -> None:
    probe = "import socket; socket.create_connection(('1.1.1.1', 80), timeout=3); print('connected')"
    result = box.exec(["python3", "-c", probe], timeout=10)
    assert result.exit_code != 0 and "connected" not in result.stdout
    assert "unreachable" in result.stderr.lower()


def test_writing_to_etc_fails_and_the_host_is_untouched(box: Sandbox) -> None:
    before = hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest()
    result = box.exec("echo 'evil:x:0:0::/:/bin/sh' >> /etc/passwd")
    # Two layers refuse it: the unprivileged user (Permission denied) and the read-only root.
    assert result.exit_code != 0
    assert "Permission denied" in result.stderr or "Read-only file system" in result.stderr
    assert hashlib.sha256(Path("/etc/passwd").read_bytes()).hexdigest() == before


def test_host_files_are_not_visible(box: Sandbox, tmp_path: Path) -> None:
    secret = Path("/tmp") / f"envgym-host-secret-{uuid.uuid4().hex}"
    secret.write_text("host secret")
    try:
        result = box.exec(f"cat {secret} /work/main/pyproject.toml")
        assert result.exit_code != 0 and "host secret" not in result.stdout
    finally:
        secret.unlink()


def test_the_token_file_is_gone_after_start(box: Sandbox) -> None:
    assert box.exec("ls -A /run/envgym").stdout.split() == ["server.sock"]


def test_killed_client_leaves_a_container_that_reap_removes(engine: object, backend: object) -> None:
    sandbox_id = start_abandoned_sandbox("docker", TEST_RUN_ID)
    assert engine.containers.get(f"envgym-{sandbox_id}").status == "running"  # type: ignore[attr-defined]
    result = subprocess.run(
        ["python", "-m", "envgym.cli", "sandbox", "reap", "--backend", "docker", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert sandbox_id in result.stdout
    with pytest.raises(docker.errors.NotFound):
        engine.containers.get(f"envgym-{sandbox_id}")  # type: ignore[attr-defined]


def test_container_exits_by_itself_at_its_ttl(engine: object, backend: object) -> None:
    sandbox = backend.create(SandboxSpec(ttl_s=2, idle_s=60), run_id=TEST_RUN_ID)  # type: ignore[attr-defined]
    name = f"envgym-{sandbox.id}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            engine.containers.get(name)  # type: ignore[attr-defined]
        except docker.errors.NotFound:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"{name} still exists 30s after its 2s ttl")
    sandbox.close()  # the container is gone already; close must still succeed


def test_warm_pool_hands_out_ready_sandboxes_and_resets_them(backend: object) -> None:
    spec = SandboxSpec(ttl_s=120, labels={LABEL_RUN_ID: TEST_RUN_ID})
    with SandboxPool(backend, spec, size=2) as pool:  # type: ignore[arg-type]
        pool.wait_ready(timeout_s=60)
        first = pool.acquire()
        first.write_file("mine.txt", "data")
        first.exec("sleep 300 > /dev/null 2>&1 &")
        pool.release(first)
        again = [pool.acquire(), pool.acquire()]
        for sandbox in again:
            assert sandbox.exec("ls -A; pgrep sleep || true").stdout == ""
            pool.release(sandbox)


def test_the_socket_directory_can_be_neither_filled_nor_swapped_from_the_sandbox(
    backend: object, box: Sandbox
) -> None:
    from envgym.sandbox.client import SandboxClient
    from envgym.sandbox.local import state_dir

    host_dir = state_dir("docker") / box.id
    fill = box.exec("dd if=/dev/zero of=/run/envgym/fill bs=1M count=64 2>&1; ls -A /run/envgym")
    assert "Permission denied" in fill.stdout and fill.stdout.split()[-1] == "server.sock"
    swap = box.exec(
        "ln -sf /var/run/docker.sock /run/envgym/server.sock || mv /run/envgym/server.sock /run/envgym/x"
    )
    assert swap.exit_code != 0
    assert sorted(p.name for p in host_dir.iterdir()) == ["server.sock"]
    assert not (host_dir / "server.sock").is_symlink()
    fresh = SandboxClient(uds=str(host_dir / "server.sock"), token="wrong")
    try:
        assert fresh.health().sandbox_id == box.id  # still the sandbox's own server
    finally:
        fresh.close()


def test_the_host_refuses_a_link_in_place_of_the_server_socket(tmp_path: Path) -> None:
    import socket

    from envgym.sandbox.docker import check_socket_dir
    from envgym.sandbox.errors import SandboxUnavailableError

    elsewhere = socket.socket(socket.AF_UNIX)
    elsewhere.bind(str(tmp_path / "docker.sock"))
    host_dir = tmp_path / "box"
    host_dir.mkdir(mode=0o755)
    (host_dir / "server.sock").symlink_to(tmp_path / "docker.sock")
    try:
        with pytest.raises(SandboxUnavailableError, match="not the sandbox server's socket"):
            check_socket_dir(host_dir)
        host_dir.chmod(0o777)
        with pytest.raises(SandboxUnavailableError, match="only this user"):
            check_socket_dir(host_dir)
    finally:
        elsewhere.close()


def test_tmpfs_mounts_fit_inside_the_memory_limit() -> None:
    from envgym.sandbox.docker import SERVER_RESERVE_MB, container_kwargs

    for spec in (SandboxSpec(), SandboxSpec(memory_mb=128), SandboxSpec(memory_mb=4096)):
        kwargs = container_kwargs(spec, "x", "/tmp/x", {})
        sizes = [int(opts.split("size=")[1].split("m")[0]) for opts in kwargs["tmpfs"].values()]
        total = sum(sizes) + int(kwargs["shm_size"].rstrip("m"))
        assert total + SERVER_RESERVE_MB <= spec.memory_mb, (spec.memory_mb, sizes, kwargs["shm_size"])


def test_a_disk_size_that_cannot_fit_in_memory_is_refused_before_any_container() -> None:
    from envgym.sandbox.docker import container_kwargs
    from envgym.sandbox.errors import InvalidRequestError

    with pytest.raises(InvalidRequestError, match=r"disk_mb: .* exceeds memory_mb=512; use disk_mb <= 216"):
        container_kwargs(SandboxSpec(memory_mb=512, disk_mb=256), "x", "/tmp/x", {})


def test_filling_every_tmpfs_leaves_the_sandbox_answering(backend: object) -> None:
    with backend.create(SandboxSpec(ttl_s=120), run_id=TEST_RUN_ID) as box:  # type: ignore[attr-defined]
        fill = "for d in /workspace /tmp /dev/shm; do dd if=/dev/zero of=$d/fill bs=1M 2>/dev/null; done; du -sm /workspace/fill /tmp/fill /dev/shm/fill"
        result = box.exec(fill, timeout=60)
        filled = sum(int(line.split()[0]) for line in result.stdout.splitlines())
        assert filled >= 200, result  # the mounts really were filled
        assert box.exec("echo alive").stdout == "alive\n"


def test_an_out_of_memory_kill_surfaces_as_a_typed_error(backend: object) -> None:
    from envgym.sandbox.errors import SandboxOutOfMemoryError

    box = backend.create(SandboxSpec(memory_mb=128, ttl_s=120), run_id=TEST_RUN_ID)  # type: ignore[attr-defined]
    try:
        # The server itself must be the OOM killer's choice: it buffers a body past the memory limit. (Code in the
        # sandbox can no longer volunteer it through /proc/<pid>/oom_score_adj: the server is non-dumpable, issue 41.)
        with pytest.raises(SandboxOutOfMemoryError, match="out of memory"):
            box.write_file("big", b"\0" * (120 << 20))
    finally:
        box.close()
