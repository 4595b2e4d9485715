"""`envgym serve --workers N`, RemoteEnv's keep-alive client, and the sandbox server's lean launcher."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import gymnasium as gym
import httpx
import numpy as np
import pytest

from envgym.remote import RemoteEnv, RemoteEnvError
from envgym.sandbox.errors import NotFoundError, SandboxUnavailableError
from envgym.sandbox.keepalive import KeepAliveClient
from envgym.sandbox.server_env import EnvHost, encode_result
from envgym.sandbox.wire import EnvCreate, EnvResetResult, EnvStepResult
from tests.sandbox.serving import REPO_ROOT, Served, child_env, start, start_serve


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = start_serve("--workers", "2")
    yield server
    assert server.stop() == 0


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _running(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pids: list[int], seconds: float = 30.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not any(_running(p) for p in pids):
            return True
        time.sleep(0.1)
    return False


def test_sessions_are_spread_over_the_workers_and_talk_to_their_worker_directly(served: Served) -> None:
    envs = [RemoteEnv(served.url, token_file=served.token_file) for _ in range(4)]
    front_port = int(served.url.rsplit(":", 1)[1])
    ports = {env._client.port for env in envs if env._client is not None}
    assert len(ports) == 2 and front_port not in ports
    assert sorted(env.session_id[:3] for env in envs) == ["w0_", "w0_", "w1_", "w1_"]
    local = gym.make("envgym/calculator-v0")
    for env in envs:
        assert env.reset(seed=5) == local.reset(seed=5)
        assert env.step("hello") == local.step("hello")
        env.close()


def test_a_client_that_ignores_the_worker_port_is_forwarded_by_the_front(served: Served) -> None:
    client = httpx.Client(base_url=served.url, headers={"Authorization": f"Bearer {served.token()}"}, timeout=60)
    session = client.post("/v1/env/sessions", json={}).json()
    assert session["port"] != int(served.url.rsplit(":", 1)[1])
    reset = client.post(f"/v1/env/sessions/{session['session_id']}/reset", json={"seed": 1}).json()
    assert reset["observation"] == gym.make("envgym/calculator-v0").reset(seed=1)[0]
    assert client.post(f"/v1/env/sessions/{session['session_id']}/step", json={"action": "hi"}).status_code == 200
    assert client.delete(f"/v1/env/sessions/{session['session_id']}").status_code == 200
    missing = client.post("/v1/env/sessions/w7_0000/step", json={"action": "hi"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFound"


def test_workers_require_the_token_too(served: Served) -> None:
    env = RemoteEnv(served.url, token_file=served.token_file)
    assert env._client is not None
    worker = f"http://127.0.0.1:{env._client.port}"
    with pytest.raises(RemoteEnvError, match="AuthError"):
        RemoteEnv(worker)
    env.close()


def _left_behind(pids: list[int]) -> str:
    """The pids still running, with their state, kernel wait channel and signal masks (a failure's diagnosis)."""
    out = []
    for pid in (p for p in pids if _running(p)):
        with contextlib.suppress(OSError):
            status = {k: v.strip() for k, _, v in (line.partition(":") for line in
                                                   Path(f"/proc/{pid}/status").read_text().splitlines())}
            wchan = Path(f"/proc/{pid}/wchan").read_text()
            out.append(f"{pid}: {status.get('State')} wchan={wchan} ppid={status.get('PPid')} "
                       f"blocked={status.get('SigBlk')} ignored={status.get('SigIgn')} caught={status.get('SigCgt')}")
        os.kill(pid, signal.SIGKILL)  # leave nothing running after the test
    return "; ".join(out)


def test_workers_die_with_the_front_even_when_it_is_killed() -> None:
    server = start_serve("--workers", "2")
    workers = _children(server.proc.pid)
    assert len(workers) == 2
    server.proc.kill()
    server.proc.wait()
    assert _wait_gone(workers), f"workers left behind: {_left_behind(workers)}"


def _block_sigterm() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def test_workers_whose_death_signal_cannot_reach_them_stop_when_the_front_is_gone() -> None:
    # A blocked signal mask is inherited by the workers: the SIGTERM the kernel sends them when the front dies stays
    # pending. Each worker also stops once its parent is no longer the front.
    server = start_serve("--workers", "2", preexec_fn=_block_sigterm)
    workers = _children(server.proc.pid)
    assert len(workers) == 2
    for pid in workers:  # the mask did reach them: SIGTERM (bit 15) is blocked
        blocked = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("SigBlk:"))
        assert int(blocked.split()[1], 16) & (1 << (signal.SIGTERM - 1))
    server.proc.kill()
    server.proc.wait()
    assert _wait_gone(workers), f"workers left behind: {_left_behind(workers)}"


def test_the_front_stops_when_a_worker_dies() -> None:
    server = start_serve("--workers", "2")
    workers = _children(server.proc.pid)
    os.kill(workers[0], signal.SIGKILL)
    assert server.proc.wait(60) == 0
    deadline = time.monotonic() + 10
    while not any("worker 0 exited" in line for line in server.stderr) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any("worker 0 exited" in line for line in server.stderr), server.stderr
    assert _wait_gone(workers)


def test_keep_alive_client_resends_a_dropped_request_with_the_same_request_id() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    heads: list[bytes] = []

    def serve() -> None:
        first, _ = listener.accept()
        heads.append(first.recv(65536))
        first.close()  # dropped before answering
        second, _ = listener.accept()
        heads.append(second.recv(65536))
        second.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        second.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client = KeepAliveClient(f"http://127.0.0.1:{port}", token="t", timeout_s=30)
    assert client.request("POST", "/v1/env/sessions/x/step", b'{"action": 1}') == b"{}"
    thread.join(30)
    ids = [line for head in heads for line in head.split(b"\r\n") if line.startswith(b"X-Request-ID")]
    assert len(ids) == 2 and ids[0] == ids[1]
    assert all(b"Authorization: Bearer t" in head for head in heads)
    listener.close()


def test_keep_alive_client_errors_are_typed_and_bounded_in_time() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        body = json.dumps({"error": {"type": "NotFound", "message": "no env session 'x'"}}).encode()
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        conn2, _ = listener.accept()  # then a server that never answers
        accepted.append(conn2)

    threading.Thread(target=serve, daemon=True).start()
    client = KeepAliveClient(f"http://127.0.0.1:{port}", token=None, timeout_s=2)
    with pytest.raises(NotFoundError, match="no env session"):
        client.request("POST", "/v1/env/sessions/x/step", b"{}")
    client.close()
    started = time.monotonic()
    with pytest.raises(SandboxUnavailableError, match="no answer within 2s"):
        client.request("POST", "/v1/env/sessions/x/step", b"{}")
    assert time.monotonic() - started < 10
    listener.close()


def test_remote_env_refuses_a_url_it_cannot_speak_to() -> None:
    with pytest.raises(RemoteEnvError, match="expected http://HOST:PORT"):
        RemoteEnv("ftp://127.0.0.1:1")


def test_the_sandbox_launcher_listens_before_its_imports_and_skips_gymnasium_numpy_and_the_environments(
    tmp_path: Path,
) -> None:
    """A client's first health request must find a listening socket while the server is still importing (it then
    waits in the accept queue instead of polling), and the server must not import the environments."""
    launcher = REPO_ROOT / "envgym" / "sandbox" / "launch.py"
    sock = tmp_path / "server.sock"
    argv = [str(launcher), "--socket", str(sock), "--workspace", str(tmp_path), "--ttl", "0.01"]
    code = (
        "import runpy, socket, sys\n"
        "listening = []\n"
        "class ListeningYet:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'envgym.sandbox' and not listening:\n"
        "            probe = socket.socket(socket.AF_UNIX)\n"
        "            listening.append(probe.connect_ex(" + repr(str(sock)) + ") == 0)\n"
        "            probe.close()\n"
        "sys.meta_path.insert(0, ListeningYet())\n"
        f"sys.argv = {argv!r}\n"
        "try:\n"
        f"    runpy.run_path({str(launcher)!r}, run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "import envgym\n"
        "print(sorted(m for m in ('gymnasium', 'numpy', 'httpx', 'envgym.env') if m in sys.modules),"
        " hasattr(envgym, '__version__'), 'envgym.sandbox.server' in sys.modules, listening, file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-P", "-c", code], capture_output=True, text=True, timeout=120, env=child_env(), cwd="/"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "[] False True [True]", proc.stderr


def test_an_env_server_started_by_the_launcher_registers_the_environments_itself(tmp_path: Path) -> None:
    argv = [
        sys.executable, "-P", str(REPO_ROOT / "envgym" / "sandbox" / "launch.py"), "--port", "0",
        "--workspace", str(tmp_path), "--env-id", "envgym/calculator-v0", "--ttl", "120",
    ]  # fmt: skip
    served = start(argv, r" on (http://\S+)")
    try:
        env = RemoteEnv(served.url)
        assert env.reset(seed=2) == gym.make("envgym/calculator-v0").reset(seed=2)
        env.close()
    finally:
        served.stop()


def test_step_results_with_numpy_values_and_non_finite_floats_are_plain_json() -> None:
    host = EnvHost("CartPole-v1")
    session = host.create(EnvCreate()).session_id
    reset = EnvResetResult.model_validate_json(host.reset(session, 0, None))
    assert reset.observation == [float(x) for x in gym.make("CartPole-v1").reset(seed=0)[0]]
    step = json.loads(host.step(session, 1))
    assert isinstance(step["observation"], list) and step["reward"] == 1.0
    body = encode_result(
        EnvStepResult, observation=np.int64(3), reward=float("inf"), terminated=False, truncated=False,
        info={"nan": float("nan"), "pair": (1, np.float32(0.5))},
    )  # fmt: skip
    assert json.loads(body)["info"] == {"nan": "NaN", "pair": [1, 0.5]}
    parsed = EnvStepResult.model_validate_json(body)
    assert parsed.observation == 3 and parsed.reward == float("inf")
