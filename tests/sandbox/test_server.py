"""The sandbox server's protocol: auth, request-id replay, typed errors, self-exit at ttl and idle."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import pytest

from envgym.sandbox.client import SandboxClient, raise_for_error
from envgym.sandbox.errors import AuthError, ConflictError, EnvHostError, InvalidRequestError, NotFoundError
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.service import SandboxService
from tests.sandbox.serving import start

TOKEN = "test-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10), env_host=EnvHost(max_sessions=10))
    http = make_http_server(service, token=TOKEN, port=0)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}", tmp_path  # type: ignore[attr-defined]
    service.stopped.set()
    thread.join(5)


def test_a_retried_request_id_runs_the_command_once(server: tuple[str, Path]) -> None:
    url, workspace = server
    client = SandboxClient(base_url=url, token=TOKEN)
    headers = {"X-Request-ID": uuid.uuid4().hex}
    body = {"cmd": "echo run >> runs.txt; wc -l < runs.txt"}
    first = client._http.post("/v1/exec", json=body, headers=headers).json()
    second = client._http.post("/v1/exec", json=body, headers=headers).json()
    assert first == second and first["stdout"].strip() == "1"
    assert (workspace / "runs.txt").read_text() == "run\n"


def test_a_request_id_reused_for_another_body_or_route_is_a_conflict(server: tuple[str, Path]) -> None:
    url, _ = server
    client = SandboxClient(base_url=url, token=TOKEN)
    headers = {"X-Request-ID": uuid.uuid4().hex}
    first = client._http.post("/v1/exec", json={"cmd": "echo one"}, headers=headers)
    assert first.json()["stdout"] == "one\n"
    other_body = client._http.post("/v1/exec", json={"cmd": "echo two"}, headers=headers)
    other_route = client._http.post("/v1/sessions", json={}, headers=headers)
    for response in (other_body, other_route):
        assert response.status_code == 409
        with pytest.raises(ConflictError, match="X-Request-ID"):
            raise_for_error(response, "POST")
    assert client._http.post("/v1/exec", json={"cmd": "echo one"}, headers=headers).json() == first.json()


def test_request_ids_of_different_credentials_never_share_answers(tmp_path: Path) -> None:
    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10))
    http = make_http_server(service, token=None, port=0)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{http.server_address[1]}"
        body = {"cmd": "echo run >> runs.txt; wc -l < runs.txt"}
        answers = [
            SandboxClient(base_url=url, token=token)._http.post("/v1/exec", json=body, headers={"X-Request-ID": "1"})
            for token in ("alice", "bob")
        ]
        assert [a.json()["stdout"].strip() for a in answers] == ["1", "2"]
    finally:
        service.stopped.set()
        thread.join(10)


def test_clients_cannot_pass_loader_arguments_to_gym_make(server: tuple[str, Path], tmp_path: Path) -> None:
    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "tools.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    client = SandboxClient(base_url=server[0], token=TOKEN)
    body = {"env_id": "envgym/calculator-v0", "kwargs": {"env_dir": str(planted)}}
    with pytest.raises(InvalidRequestError, match=r"kwargs: .*env_dir: not an option .*allowed: task, seed"):
        client.request("POST", "/v1/env/sessions", json_body=body)
    assert not (tmp_path / "ran").exists()
    made = client.request(
        "POST", "/v1/env/sessions", json_body={"env_id": "envgym/calculator-v0", "kwargs": {"max_steps": 2}}
    )
    assert made.json()["env_id"] == "envgym/calculator-v0"


class SlowToMake(gym.Env[int, int]):
    """An environment whose construction takes a while, as a large world's does: creates overlap."""

    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        time.sleep(0.2)


def test_max_sessions_holds_under_simultaneous_creates(server: tuple[str, Path]) -> None:
    if "tests/SlowToMake-v0" not in gym.registry:
        gym.register("tests/SlowToMake-v0", entry_point=SlowToMake)
    client = SandboxClient(base_url=server[0], token=TOKEN, retries=0, timeout_s=120)
    start_line = threading.Barrier(60)
    outcomes: list[str] = []

    def create() -> None:
        start_line.wait(30)
        try:
            client.request("POST", "/v1/env/sessions", json_body={"env_id": "tests/SlowToMake-v0"})
            outcomes.append("made")
        except EnvHostError as exc:
            assert "too many sessions" in str(exc)
            outcomes.append("refused")

    threads = [threading.Thread(target=create) for _ in range(60)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(outcomes).count("made") == 10 and len(outcomes) == 60


def test_a_sandbox_server_with_an_env_id_serves_env_routes_only(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-m", "envgym.sandbox.server", "--port", "0", "--workspace", str(tmp_path),
        "--env-id", "envgym/calculator-v0", "--ttl", "120",
    ]
    served = start(argv, r" on (http://\S+)")
    try:
        client = SandboxClient(base_url=served.url)
        assert client.health().features == ["env", "shutdown"]
        for method, path in [("POST", "/v1/exec"), ("POST", "/v1/sessions"), ("PUT", "/v1/archive"), ("POST", "/v1/reset")]:
            with pytest.raises(NotFoundError, match="no route"):
                client.request(method, path, json_body={"cmd": "id"}, params={"dest": "."})
        session = client.request("POST", "/v1/env/sessions", json_body={}).json()
        assert session["env_id"] == "envgym/calculator-v0"
    finally:
        served.stop()


def test_a_wrong_token_is_rejected(server: tuple[str, Path]) -> None:
    url, _ = server
    with pytest.raises(AuthError):
        SandboxClient(base_url=url, token="wrong").request("POST", "/v1/exec", json_body={"cmd": "true"})
    assert SandboxClient(base_url=url).health().protocol == 1  # health needs no token (readiness probes)


def test_errors_are_typed_and_name_the_field(server: tuple[str, Path]) -> None:
    client = SandboxClient(base_url=server[0], token=TOKEN)
    with pytest.raises(NotFoundError, match=r"nope\.txt"):
        client.request("GET", "/v1/files", params={"path": "nope.txt"})
    with pytest.raises(InvalidRequestError, match="timeout_s"):
        client.request("POST", "/v1/exec", json_body={"cmd": "true", "timeout_s": -1})
    with pytest.raises(NotFoundError, match="no route"):
        client.request("POST", "/v1/teleport", json_body={})


def test_an_archive_escaping_its_destination_is_refused(server: tuple[str, Path]) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    client = SandboxClient(base_url=server[0], token=TOKEN)
    with pytest.raises(InvalidRequestError, match="outside"):
        client.request("PUT", "/v1/archive", content=buf.getvalue(), params={"dest": "inbox"})
    assert not (server[1] / "escaped.txt").exists()


@pytest.mark.parametrize("flag", ["--ttl", "--idle"])
def test_the_server_exits_by_itself(tmp_path: Path, flag: str) -> None:
    argv = [
        sys.executable,
        "-m",
        "envgym.sandbox.server",
        "--port",
        "0",
        "--workspace",
        str(tmp_path),
        flag,
        "1",
    ]
    started = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
    assert time.monotonic() - started < 15
    assert f"stopped: {flag[2:]}" in proc.stderr
