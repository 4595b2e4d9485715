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

import pytest

from envgym.sandbox.client import SandboxClient
from envgym.sandbox.errors import AuthError, InvalidRequestError, NotFoundError
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.service import SandboxService

TOKEN = "test-token"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10))
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
