"""RemoteEnv over `envgym serve`: gymnasium's checker, concurrency, idle reaping, auth by token file, signals."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import httpx
import pytest
from gymnasium.utils.env_checker import check_env

from envgym.remote import RemoteEnv, RemoteEnvError
from tests.sandbox.serving import Served, child_env, start_serve


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = start_serve()
    yield server
    assert server.stop() == 0


def test_remote_env_passes_the_gymnasium_checker(served: Served) -> None:
    env = RemoteEnv(served.url, token_file=served.token_file)
    check_env(env, skip_render_check=True)
    env.close()


def test_gym_make_builds_a_remote_env(served: Served) -> None:
    env = gym.make("envgym/remote-v0", url=served.url, token_file=served.token_file)
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and info["env_name"]
    assert env.step("no tool call here")[1] == pytest.approx(env.step("again")[1])
    env.close()
    env = gym.make("envgym/remote-v0", url=served.url, token=served.token())
    assert env.reset(seed=3)[0] == obs
    env.close()


def test_remote_episodes_match_in_process_ones(served: Served) -> None:
    local = gym.make("envgym/calculator-v0")
    remote = RemoteEnv(served.url, token_file=served.token_file)
    assert remote.reset(seed=7) == local.reset(seed=7)
    for action in ["hello", '<tool_call>{"name": "nope", "arguments": {}}</tool_call>']:
        assert remote.step(action) == local.step(action)
    remote.close()


def test_many_sessions_run_concurrently(served: Served) -> None:
    def episode(seed: int) -> str:
        env = RemoteEnv(served.url, token_file=served.token_file)
        obs, _ = env.reset(seed=seed)
        env.step("thinking")
        env.close()
        return obs

    with ThreadPoolExecutor(16) as pool:
        observations = list(pool.map(episode, range(32)))
    assert len(observations) == 32 and all(observations)


def test_serve_requires_a_token_by_default_and_prints_only_the_file_holding_it(served: Served) -> None:
    assert served.token_file is not None
    assert stat.S_IMODE(os.stat(served.token_file).st_mode) == 0o600
    assert served.token() not in "".join(served.stderr)
    with pytest.raises(RemoteEnvError, match="AuthError"):
        RemoteEnv(served.url)
    with pytest.raises(RemoteEnvError, match="AuthError"):
        RemoteEnv(served.url, token="not-the-token")


def test_serve_uses_the_token_file_it_is_given(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-chosen-by-the-operator\n")
    token_file.chmod(0o600)
    server = start_serve("--token-file", str(token_file))
    try:
        assert server.token_file == str(token_file)
        env = RemoteEnv(server.url, token="a-token-chosen-by-the-operator")
        env.reset(seed=0)
        env.close()
    finally:
        server.stop()


def test_serve_refuses_a_token_file_others_can_read(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("secret\n")
    token_file.chmod(0o644)
    argv = [sys.executable, "-m", "envgym.cli", "serve", "calculator", "--port", "0", "--token-file", str(token_file)]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 2
    assert "mode 0644" in done.stderr and "chmod 600" in done.stderr
    assert "secret" not in done.stderr


def test_serve_refuses_no_auth_off_loopback() -> None:
    argv = [sys.executable, "-m", "envgym.cli", "serve", "calculator", "--no-auth", "--host", "0.0.0.0"]
    done = subprocess.run(argv, capture_output=True, text=True, env=child_env(), timeout=120)
    assert done.returncode == 2 and "--no-auth" in done.stderr and "loopback" in done.stderr


def test_serve_without_auth_on_loopback() -> None:
    server = start_serve("--no-auth")
    try:
        assert server.token_file is None
        env = RemoteEnv(server.url)
        env.reset(seed=0)
        env.close()
    finally:
        server.stop()


def test_clients_choose_options_from_the_allow_list_only(served: Served) -> None:
    env = RemoteEnv(served.url, token_file=served.token_file, max_steps=1)
    env.reset(seed=0)
    assert env.step("one")[3] is True  # truncated after max_steps=1
    env.close()
    with pytest.raises(RemoteEnvError, match=r"InvalidRequestError.*env_dir.*not an option"):
        RemoteEnv(served.url, token_file=served.token_file, env_dir="/tmp")


def test_an_env_server_has_no_exec_files_archive_or_shutdown_routes(served: Served) -> None:
    headers = {"Authorization": f"Bearer {served.token()}"}
    with httpx.Client(base_url=served.url, headers=headers, timeout=30) as http:
        assert http.get("/v1/health").json()["features"] == ["env"]
        for method, path in [
            ("POST", "/v1/exec"),
            ("POST", "/v1/exec/stream"),
            ("POST", "/v1/sessions"),
            ("GET", "/v1/files?path=x"),
            ("PUT", "/v1/files?path=x"),
            ("GET", "/v1/archive?src=."),
            ("PUT", "/v1/archive?dest=."),
            ("POST", "/v1/reset"),
            ("POST", "/v1/shutdown"),
        ]:
            response = http.request(method, path, json={"cmd": "id"})
            assert response.status_code == 404, (method, path)
            assert response.json()["error"]["type"] == "NotFound"
    assert served.proc.poll() is None


def test_idle_sessions_are_reaped() -> None:
    server = start_serve("--session-idle", "1")
    try:
        env = RemoteEnv(server.url, token_file=server.token_file)
        env.reset(seed=0)
        time.sleep(2.5)
        with pytest.raises(RemoteEnvError, match="reaped"):
            env.step("too late")
    finally:
        server.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_promptly_on_a_signal_even_when_its_parent_ignored_sigint(sig: signal.Signals) -> None:
    server = start_serve(sigint_ignored=True)
    env = RemoteEnv(server.url, token_file=server.token_file)
    env.reset(seed=0)
    assert server.stop(sig, wait_s=5) == 0


SIGNAL_WHILE_WAITING = """
import signal, tempfile
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import stop_on_signals
from envgym.sandbox.service import SandboxService

service = SandboxService("t", ExecDefaults(tempfile.mkdtemp(), timeout_s=10))
with stop_on_signals(service) as received:
    # Where a server's main thread spends its life: inside service.stopped.wait(), holding that event's own lock.
    with service.stopped._cond:
        signal.raise_signal(signal.SIGTERM)
print(received)
"""


def test_a_signal_that_lands_while_the_server_waits_on_its_stop_event_is_taken_without_a_lock() -> None:
    # A handler that set the stop event there waited on a lock its own thread held: an `envgym serve` worker was
    # found so, SIGTERMed by its dying front and alive hours later. The handler now only records the signal.
    proc = subprocess.run([sys.executable, "-c", SIGNAL_WHILE_WAITING], capture_output=True, text=True, timeout=30,
                          env=child_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "['SIGTERM']"


def test_the_trainer_rolls_out_on_an_env_server_as_it_does_in_process(served: Served, tmp_path: Path) -> None:
    # Issue 18: rollouts against RemoteEnv endpoints (on Kubernetes, the env-server Service).
    from envgym.train import GRPOConfig, GRPOTrainer
    from envgym.train.policy import tiny_random_policy

    settings = {"model": "tiny-random", "group_size": 2, "tasks_per_step": 1, "max_new_tokens": 6,
                "max_sequence_tokens": 512, "max_turns": 1, "heldout_tasks": 2, "seed": 3}
    policy = tiny_random_policy(6)  # shared: rollouts do not change the weights
    local = GRPOTrainer(GRPOConfig(output_dir=str(tmp_path / "local"), **settings), policy=policy)
    remote = GRPOTrainer(
        GRPOConfig(output_dir=str(tmp_path / "remote"), env_server_url=served.url,
                   env_server_token_file=served.token_file, **settings),
        policy=policy,
    )
    assert all(isinstance(env, RemoteEnv) for env in remote.envs)
    assert remote.train_tasks == local.train_tasks
    want, got = local.rollout(), remote.rollout()
    assert [g.task_id for g in got] == [g.task_id for g in want] and len(got) == 1
    for a, b in zip(want, got, strict=True):
        assert b.rewards == a.rewards
        assert [e.messages for e in b.episodes] == [e.messages for e in a.episodes]
        assert [s.token_ids for e in b.episodes for s in e.samples] == [s.token_ids for e in a.episodes for s in e.samples]
    for env in remote.envs:
        env.close()


def test_the_trainer_refuses_an_env_server_serving_another_env(served: Served) -> None:
    from envgym.train.trainer import make_env

    with pytest.raises(ValueError, match=r"serves 'envgym/calculator-v0', but env_id is 'envgym/retail-v0'"):
        make_env("envgym/retail-v0", served.url, served.token_file)
