"""RemoteEnv over `envgym serve`: gymnasium's checker, concurrency, idle reaping, a server that dies."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from envgym.remote import RemoteEnv, RemoteEnvError

REPO_ROOT = Path(__file__).resolve().parents[2]


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def start_server(*extra: str, sigint_ignored: bool = False) -> tuple[subprocess.Popen[str], str]:
    """Start `envgym serve calculator`; its stderr is drained by a thread so a full pipe never blocks it.

    `sigint_ignored` starts it the way a CI runner's background job does: with SIGINT inherited as ignored.
    """
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "envgym.cli", "serve", "calculator", "--port", "0", *extra],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=_ignore_sigint if sigint_ignored else None,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    match = re.search(r"on (http://\S+)", line)
    assert match, f"envgym serve did not report its address: {line!r}"
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    return proc, match.group(1)


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    proc, address = start_server()
    yield address
    proc.send_signal(signal.SIGINT)
    proc.wait(10)


def test_remote_env_passes_the_gymnasium_checker(url: str) -> None:
    env = RemoteEnv(url)
    check_env(env, skip_render_check=True)
    env.close()


def test_gym_make_builds_a_remote_env(url: str) -> None:
    env = gym.make("envgym/remote-v0", url=url)
    obs, info = env.reset(seed=3)
    assert isinstance(obs, str) and info["env_name"]
    assert env.step("no tool call here")[1] == pytest.approx(env.step("again")[1])
    env.close()


def test_remote_episodes_match_in_process_ones(url: str) -> None:
    local = gym.make("envgym/calculator-v0")
    remote = RemoteEnv(url)
    assert remote.reset(seed=7) == local.reset(seed=7)
    for action in ["hello", '<tool_call>{"name": "nope", "arguments": {}}</tool_call>']:
        assert remote.step(action) == local.step(action)
    remote.close()


def test_many_sessions_run_concurrently(url: str) -> None:
    def episode(seed: int) -> str:
        env = RemoteEnv(url)
        obs, _ = env.reset(seed=seed)
        env.step("thinking")
        env.close()
        return obs

    with ThreadPoolExecutor(16) as pool:
        observations = list(pool.map(episode, range(32)))
    assert len(observations) == 32 and all(observations)


def test_idle_sessions_are_reaped() -> None:
    proc, address = start_server("--session-idle", "1")
    try:
        env = RemoteEnv(address)
        env.reset(seed=0)
        time.sleep(2.5)
        with pytest.raises(RemoteEnvError, match="reaped"):
            env.step("too late")
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_promptly_on_a_signal_even_when_its_parent_ignored_sigint(sig: signal.Signals) -> None:
    proc, address = start_server(sigint_ignored=True)
    env = RemoteEnv(address)
    env.reset(seed=0)
    proc.send_signal(sig)
    try:
        assert proc.wait(5) == 0
    finally:
        proc.kill()


def test_a_server_killed_mid_episode_raises_a_clear_error_within_the_timeout() -> None:
    proc, address = start_server()
    env = RemoteEnv(address, timeout_s=5)
    env.reset(seed=0)
    env.step("first")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    started = time.monotonic()
    with pytest.raises(RemoteEnvError, match="unreachable"):
        env.step("second")
    assert time.monotonic() - started < 5
    env.close()
