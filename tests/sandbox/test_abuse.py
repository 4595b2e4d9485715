"""The second round of attacks on envgym (issue 41): each test is one finding, attacked as the report describes.

Host state: a planted or shared state folder, a socket folder swapped under a live client, a planted meta.json.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from envgym.sandbox import get_backend
from envgym.sandbox.errors import SandboxError
from envgym.sandbox.local import state_dir
from envgym.sandbox.spec import SandboxSpec
from tests.sandbox.test_http_limits import LIMITS, TOKEN, Address, read_until_closed, statuses

_SPEC = SandboxSpec(ttl_s=120, idle_s=60, timeout_s=30)


@pytest.fixture
def own_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh per-test state root, so tests never see each other's sandboxes."""
    root = tmp_path / "state"
    monkeypatch.setenv("ENVGYM_SANDBOX_DIR", str(root))
    return root


# -- finding 1: the host state folder -------------------------------------------------------------------------------


def test_the_default_state_folder_is_per_user_and_private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENVGYM_SANDBOX_DIR", raising=False)
    runtime = tmp_path / "run-user"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    folder = state_dir("local")
    assert folder.is_relative_to(runtime)
    for level in (folder, folder.parent):
        info = os.lstat(level)
        assert info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


def test_without_a_runtime_dir_the_state_folder_name_carries_the_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    from envgym.sandbox.statedir import default_root

    monkeypatch.delenv("ENVGYM_SANDBOX_DIR", raising=False)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    assert default_root() == Path(f"/tmp/envgym-sandboxes-{os.getuid()}")


@pytest.mark.parametrize("plant", ["world-writable", "group-readable", "symlink"])
def test_a_planted_state_folder_is_refused(own_root: Path, tmp_path: Path, plant: str) -> None:
    if plant == "symlink":
        target = tmp_path / "attacker"
        target.mkdir(mode=0o700)
        own_root.symlink_to(target)
    else:
        own_root.mkdir()
        own_root.chmod(0o777 if plant == "world-writable" else 0o750)
    with pytest.raises(SandboxError, match=r"other users|not a directory"):
        get_backend("local").create(_SPEC)


@pytest.mark.skipif(os.getuid() != 0, reason="planting a folder owned by another user needs root (chown)")
def test_a_state_folder_owned_by_another_user_is_refused(own_root: Path) -> None:
    own_root.mkdir(mode=0o700)
    os.chown(own_root, 65534, 65534)
    with pytest.raises(SandboxError, match="owned by uid 65534"):
        get_backend("local").create(_SPEC)


def _attacker(path: Path, seen: list[bytes]) -> socket.socket:
    """Listen on `path` like the attacker of finding 1: record what arrives, answer with a forged exec result."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                seen.append(conn.recv(65536))
                forged = json.dumps({"exit_code": 0, "stdout": "forged\n", "stderr": ""}).encode()
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(forged), forged))

    threading.Thread(target=serve, daemon=True).start()
    return listener


def test_a_socket_folder_swapped_under_a_live_client_is_never_connected_to(own_root: Path) -> None:
    from envgym.sandbox.errors import NotFoundError

    box = get_backend("local").create(_SPEC)
    try:
        folder = state_dir("local") / box.id
        folder.rename(folder.with_name(box.id + "-aside"))
        for sub in ("", "workspace", "tmp"):  # the real server's paths still lead somewhere
            (folder / sub).mkdir()
        seen: list[bytes] = []
        listener = _attacker(folder / "server.sock", seen)
        try:
            with pytest.raises(NotFoundError):
                box.read_file("missing")  # an error closes the connection: the next request reconnects
            assert box.exec("echo real-answer").stdout == "real-answer\n"
            assert seen == []
        finally:
            listener.close()
    finally:
        box.close()


@pytest.fixture
def bystander(own_root: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """An unrelated process whose command line names a sandbox folder (the old reaper matched by name)."""
    name = "a1b2c3d4e5f6"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", name], start_new_session=True)
    yield proc, name
    proc.kill()
    proc.wait()


def _plant_meta(name: str, pid: int, **extra: int) -> Path:
    folder = state_dir("local") / name
    folder.mkdir()
    labels = {"envgym.expires-at": "0", "envgym.run-id": "x", "envgym.owner": "elsewhere:1"}
    (folder / "meta.json").write_text(json.dumps({"server_pid": pid, "labels": labels, **extra}))
    return folder


def test_the_reaper_never_kills_a_process_a_planted_meta_json_names(
    bystander: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, name = bystander
    _plant_meta(name, proc.pid)
    assert get_backend("local").reap() == [name]
    time.sleep(0.2)
    assert proc.poll() is None, "the reaper killed a process it did not start"


def test_the_reaper_refuses_a_pid_whose_start_time_is_not_the_recorded_one(
    bystander: tuple[subprocess.Popen[bytes], str],
) -> None:
    from envgym.sandbox.pidproof import record_spawn

    proc, name = bystander
    _plant_meta(name, proc.pid, server_start_ticks=record_spawn(proc.pid).start_ticks + 1)
    get_backend("local").reap()
    time.sleep(0.2)
    assert proc.poll() is None


def test_the_reaper_still_kills_an_expired_sandbox_it_started(own_root: Path) -> None:
    box = get_backend("local").create(SandboxSpec(ttl_s=120, idle_s=60, timeout_s=30))
    try:
        meta_file = state_dir("local") / box.id / "meta.json"
        meta = json.loads(meta_file.read_text())
        meta["labels"]["envgym.expires-at"] = "0"
        meta_file.write_text(json.dumps(meta))
        assert get_backend("local").reap() == [box.id]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _gone(meta["server_pid"]):
            time.sleep(0.05)
        assert _gone(meta["server_pid"])
    finally:
        box.close()


def _gone(pid: int) -> bool:
    """Exited (a zombie still waiting for its parent counts: the parent is this test process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z"
    except OSError:
        return True


# -- finding 4: request targets, NUL paths, token files --------------------------------------------------------------


@pytest.fixture
def address(tmp_path: Path) -> Iterator[Address]:
    from envgym.sandbox.process import ExecDefaults
    from envgym.sandbox.server import make_http_server, serve_until_stopped
    from envgym.sandbox.service import SandboxService

    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10))
    http = make_http_server(service, token=TOKEN, port=0, limits=LIMITS)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield Address("127.0.0.1", http.server_address[1])
    service.stopped.set()
    thread.join(10)


@pytest.mark.parametrize("target", ["//evil/v1/health", "/v1/he\talth", "/v1/he\ralth", "http://evil/v1/health"],
                         ids=["double slash", "tab", "CR", "absolute form"])
def test_a_request_target_that_is_not_a_plain_path_is_refused(address: Address, target: str) -> None:
    sock = address.connect()
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n\r\n".encode("latin-1"))
    assert statuses(read_until_closed(sock)) in ([400], [404])


def test_a_nul_in_a_file_api_path_is_a_400(address: Address) -> None:
    sock = address.connect()
    sock.sendall(f"GET /v1/files?path=a%00b HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
    answer = read_until_closed(sock)
    assert statuses(answer) == [400] and b"NUL" in answer


def test_a_sandbox_server_answers_a_non_ascii_bearer_token_with_401(address: Address) -> None:
    sock = address.connect()
    sock.sendall("GET /v1/files?path=a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer éé\r\n\r\n".encode())
    assert statuses(read_until_closed(sock)) == [401]


def test_a_token_file_that_is_a_link_is_refused(tmp_path: Path) -> None:
    from envgym.sandbox.tokens import TokenFileError, read_token_file

    real = tmp_path / "real"
    real.write_text("s3cret")
    real.chmod(0o600)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(TokenFileError, match="symbolic link"):
        read_token_file(str(tmp_path / "link"))


@pytest.mark.skipif(os.getuid() != 0, reason="a file owned by another user needs root (chown)")
def test_a_token_file_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    from envgym.sandbox.tokens import TokenFileError, read_token_file

    path = tmp_path / "token"
    path.write_text("planted")
    path.chmod(0o600)
    os.chown(path, 65534, 65534)
    with pytest.raises(TokenFileError, match="owned by uid 65534"):
        read_token_file(str(path))


# -- finding 4: the in-sandbox server's memory ------------------------------------------------------------------------

_READ_SERVER_MEMORY = r"""
import os, sys
def argv(pid):
    return open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
# The server: python running launch.py (docker-init, pid 1, carries it in its arguments too).
server = next(p for p in os.listdir("/proc") if p.isdigit()
              and argv(p)[0].startswith(b"python") and any(a.endswith(b"launch.py") for a in argv(p)))
for what in ("mem", "environ"):
    try:
        with open(f"/proc/{server}/{what}", "rb") as fh:
            fh.read(1)
        print(what, "readable")
    except OSError as exc:
        print(what, "refused", exc.errno)
"""


@pytest.mark.docker
def test_code_in_a_docker_sandbox_cannot_read_the_servers_memory() -> None:
    docker = pytest.importorskip("docker")
    from envgym.sandbox.docker import docker_available
    from envgym.sandbox.image import ensure_image

    if not docker_available():
        pytest.skip("no Docker engine on this machine (scripts/ci_docker.sh starts one)")
    ensure_image(docker.from_env(), quiet=True)
    with get_backend("docker").create(SandboxSpec(memory_mb=128, pids=64, ttl_s=120, timeout_s=30)) as box:
        result = box.exec(["python3", "-c", _READ_SERVER_MEMORY])
    assert result.stdout.split("\n")[:2] == ["mem refused 13", "environ refused 13"], result.stdout + result.stderr


# -- finding 4: labels a SandboxSpec may not set ----------------------------------------------------------------------


@pytest.mark.parametrize("key", ["envgym.io/role", "envgym.io/sandbox-client", "envgym.io/anything"])
def test_a_sandbox_spec_cannot_set_reserved_labels(key: str) -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="reserved"):
        SandboxSpec(labels={key: "true"})


def test_a_pod_keeps_its_templates_role_whatever_labels_reach_it() -> None:
    from envgym.sandbox.k8s_pods import pod_body

    template = {"metadata": {"labels": {"envgym.io/role": "sandbox"}},
                "spec": {"containers": [{"name": "server", "args": []}],
                         "volumes": [{"name": "envgym-token-secret", "secret": {"secretName": "x"}}]}}
    spec = SandboxSpec.model_construct(**{**SandboxSpec().model_dump(), "labels": {"envgym.io/role": "trainer"}})
    owner = {"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}
    pod = pod_body(template, "t", "ns", spec, sandbox_id="abc", run_id="r", env_id=None, owner=owner)
    assert pod["metadata"]["labels"]["envgym.io/role"] == "sandbox"
