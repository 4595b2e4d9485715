"""Env servers run resets and steps on their event loop, except for environments caught waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
from pydantic import ValidationError

from envgym.remote import RemoteEnv, decode_reset, decode_step
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.service import SandboxService
from envgym.sandbox.waits import STRIKES, WAIT_LIMIT_S, WaitWatch
from envgym.sandbox.wire import EnvCreate

TOKEN = "test-token"


class Sleepy(gym.Env[int, int]):
    """Sleeps `pause` seconds in every step, as an environment waiting on a model or the network would."""

    pause = 4 * WAIT_LIMIT_S
    sleeping = threading.Event()
    action_space = gym.spaces.Discrete(2)
    observation_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        super().reset(seed=seed)
        return 0, {}

    def step(self, action: int) -> tuple[int, float, bool, bool, dict[str, Any]]:
        Sleepy.sleeping.set()
        time.sleep(Sleepy.pause)
        return 0, 0.0, False, False, {}


if "tests/Sleepy-v0" not in gym.registry:
    gym.register("tests/Sleepy-v0", entry_point=Sleepy)


def test_a_quick_environment_keeps_running_on_the_event_loop() -> None:
    host = EnvHost("envgym/calculator-v0")
    session = host.create(EnvCreate()).session_id
    host.reset(session, 0, None)
    for _ in range(2 * STRIKES):
        host.step(session, "hello")
    assert host.runs_inline(session)


def test_an_environment_caught_waiting_three_times_moves_to_the_handler_threads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    host = EnvHost("tests/Sleepy-v0")
    session = host.create(EnvCreate()).session_id
    host.reset(session, 0, None)
    for _ in range(STRIKES - 1):
        host.step(session, 0)
    assert host.runs_inline(session)
    host.step(session, 0)
    assert not host.runs_inline(session)
    assert "tests/Sleepy-v0 waited in 3 of 100 calls" in capsys.readouterr().err


def test_waits_while_the_host_is_excused_are_not_counted() -> None:
    watch = WaitWatch(excused=lambda: True)
    for _ in range(2 * STRIKES):
        watch.call("tests/Sleepy-v0", "step", lambda: time.sleep(Sleepy.pause))
    assert watch.inline("tests/Sleepy-v0")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    service = SandboxService(
        "t", ExecDefaults(str(tmp_path)), env_host=EnvHost(), exec_enabled=False, remote_shutdown=False
    )
    http = make_http_server(service, token=TOKEN, port=0)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}"
    service.stopped.set()
    thread.join(5)


def test_once_moved_a_waiting_environment_no_longer_holds_up_the_other_sessions(server: str) -> None:
    sleepy = RemoteEnv(server, "tests/Sleepy-v0", token=TOKEN)
    quick = RemoteEnv(server, "envgym/calculator-v0", token=TOKEN)
    assert quick.reset(seed=1) == gym.make("envgym/calculator-v0").reset(seed=1)
    sleepy.reset(seed=0)
    for _ in range(STRIKES):
        sleepy.step(0)  # on the event loop: the server answers nothing else meanwhile
    Sleepy.pause, short_pause = 2.0, Sleepy.pause
    Sleepy.sleeping.clear()
    slow = threading.Thread(target=sleepy.step, args=(0,))
    try:
        slow.start()
        assert Sleepy.sleeping.wait(30)
        started = time.monotonic()
        quick.step("hello")
        assert time.monotonic() - started < Sleepy.pause / 2
    finally:
        slow.join(30)
        Sleepy.pause = short_pause
    sleepy.close()
    quick.close()


def test_remote_env_decodes_non_finite_rewards_and_names_a_missing_field() -> None:
    body = b'{"observation":[1],"reward":"Infinity","terminated":false,"truncated":true,"info":{"x":"NaN"}}'
    assert decode_step(body) == ([1], float("inf"), False, True, {"x": "NaN"})
    assert decode_reset(b'{"observation":"o","info":{}}') == ("o", {})
    with pytest.raises(ValidationError, match="terminated"):
        decode_step(b'{"observation":1,"reward":0.0,"truncated":false,"info":{},"extra":1}')


def test_a_large_action_is_parsed_and_stepped_off_the_event_loop(
    server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A megabyte action parsed and hashed on the event loop held every other connection of the worker for
    milliseconds (docs/results/soak_latency.md): a body over `ServerLimits.inline_body_bytes` runs on a handler
    thread even for a quick environment, while small steps stay on the loop."""
    from envgym.env import ToolWorldEnv
    from envgym.sandbox.limits import ServerLimits

    threads: list[tuple[int, str]] = []
    step = ToolWorldEnv.step

    def recording(self: ToolWorldEnv, action: Any) -> Any:
        threads.append((len(str(action)), threading.current_thread().name))
        return step(self, action)

    monkeypatch.setattr(ToolWorldEnv, "step", recording)
    env = RemoteEnv(server, "envgym/calculator-v0", token=TOKEN)
    env.reset(seed=0)
    large = "x" * (ServerLimits().inline_body_bytes + 1)
    for action in ("hello", large, "hello", large):
        env.step(action)
    env.close()
    (_, small_a), (_, big_a), (_, small_b), (_, big_b) = threads
    assert small_a == small_b  # the event loop's thread, both times
    assert small_a not in (big_a, big_b), threads
