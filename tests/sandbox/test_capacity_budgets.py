"""Connection and session budgets (issue 46): derived from the file descriptor limit and memory, or set by

Episode budgets (steps, messages, action bytes, answer size), the encode that moves off the event loop, the server's
buffered-body budget and the whole-body deadline, against real servers with small limits.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from pydantic import ValidationError

from envgym.remote import RemoteEnv, RemoteEnvError
from envgym.sandbox.errors import BudgetExceededError
from envgym.sandbox.limits import ENV_SERVER_LIMITS, EPISODE_LIMITS, SANDBOX_LIMITS, EpisodeLimits
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.service import SandboxService
from envgym.sandbox.wire import EnvCreate, EnvOptions
from tests.sandbox.test_http_limits import read_until_closed, statuses

ENV = "envgym/calculator-v0"
TOKEN = "budget-token"


def _host(**limits: int) -> tuple[EnvHost, str]:
    host = EnvHost()
    host.episode_limits = replace(EPISODE_LIMITS, **limits)
    session = host.create(EnvCreate(env_id=ENV)).session_id
    host.reset(session, 0, None)
    return host, session


def test_a_client_cannot_ask_for_unbounded_max_steps() -> None:
    with pytest.raises(ValidationError, match="less than or equal"):
        EnvOptions(max_steps=10**9)
    assert EnvOptions(max_steps=EPISODE_LIMITS.max_steps).max_steps == EPISODE_LIMITS.max_steps


def test_steps_past_the_episode_budget_are_refused_until_a_reset() -> None:
    host, session = _host(max_steps=3)
    for _ in range(3):
        host.step(session, "hello", None)
    with pytest.raises(BudgetExceededError, match="3 steps"):
        host.step(session, "hello", None)
    host.reset(session, 0, None)
    host.step(session, "hello", None)


def test_a_conversation_past_the_message_budget_is_refused() -> None:
    host, session = _host(max_messages=6)
    with pytest.raises(BudgetExceededError, match="messages"):
        for _ in range(10):
            host.step(session, "hello", None)


def test_actions_past_the_byte_budget_are_refused_before_the_env_sees_them() -> None:
    host, session = _host(max_action_bytes=10_000)
    host.step(session, "x" * 6_000, None)
    with pytest.raises(BudgetExceededError, match="max_action_bytes"):
        host.step(session, "x" * 6_000, None)


def test_an_answer_over_the_response_budget_is_refused() -> None:
    host, session = _host(max_response_bytes=4_000)
    with pytest.raises(BudgetExceededError, match="max_response_bytes"):
        host.step(session, "y" * 5_000, None)


def test_a_session_with_large_answers_runs_off_the_event_loop() -> None:
    host, session = _host(inline_encode_bytes=2_000)
    assert host.runs_inline(session)
    host.step(session, "z" * 3_000, None)
    assert not host.runs_inline(session)


@pytest.fixture
def env_server(tmp_path: Path) -> Iterator[str]:
    host = EnvHost(env_id=ENV)
    host.episode_limits = EpisodeLimits(max_steps=2)
    service = SandboxService("t", ExecDefaults(str(tmp_path)), env_host=host, exec_enabled=False)
    http = make_http_server(service, token=TOKEN, port=0, limits=ENV_SERVER_LIMITS)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{http.server_address[1]}"
    service.stopped.set()
    thread.join(10)


def test_the_remote_client_reads_a_budget_error_as_its_type(env_server: str) -> None:
    env = RemoteEnv(env_server, token=TOKEN)
    try:
        env.reset(seed=0)
        env.step("a")
        env.step("b")
        with pytest.raises(RemoteEnvError, match=r"BudgetExceededError: .*max_steps") as caught:
            env.step("c")
        assert isinstance(caught.value.__cause__, BudgetExceededError)
    finally:
        env.close()


# -- the HTTP front: bodies held at once, and a whole-body deadline -------------------------------------------------

BODY_LIMITS = replace(
    SANDBOX_LIMITS,
    max_connections=8,
    max_body_bytes=1 << 20,
    header_timeout_s=5.0,
    body_timeout_s=1.0,
    body_deadline_s=2.5,
    max_buffered_body_bytes=(1 << 20) + (1 << 19),
    linger_s=0.5,
)


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[str, int]]:
    service = SandboxService("t", ExecDefaults(str(tmp_path), timeout_s=10))
    http = make_http_server(service, token=TOKEN, port=0, limits=BODY_LIMITS)
    thread = threading.Thread(target=serve_until_stopped, args=(service, http), daemon=True)
    thread.start()
    yield "127.0.0.1", http.server_address[1]
    service.stopped.set()
    thread.join(10)


def _put_head(length: int) -> bytes:
    return (
        f"PUT /v1/files?path=f HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_bodies_held_at_once_have_a_server_wide_budget(front: tuple[str, int]) -> None:
    first = socket.create_connection(front, timeout=10)
    first.sendall(_put_head(1 << 20) + b"x" * 1000)  # holds 1 MiB of the 1.5 MiB budget while it trickles
    time.sleep(0.3)  # let the server reserve the first body before the second head arrives
    second = socket.create_connection(front, timeout=10)
    second.sendall(_put_head(1 << 20))
    answer = read_until_closed(second)
    assert statuses(answer) == [429] and b"BudgetExceeded" in answer
    first.sendall(b"x" * ((1 << 20) - 1000))
    assert statuses(first.recv(4096)) == [200]
    first.close()


def test_a_body_dribbled_under_the_pause_limit_still_meets_the_whole_body_deadline(front: tuple[str, int]) -> None:
    sock = socket.create_connection(front, timeout=10)
    sock.sendall(_put_head(1000))
    started = time.monotonic()
    closed = False
    while time.monotonic() - started < BODY_LIMITS.body_deadline_s + 10:
        try:
            sock.sendall(b"x")  # a byte every 0.4 s: never a pause of body_timeout_s
        except OSError:
            closed = True
            break
        sock.settimeout(0.4)
        try:
            data = sock.recv(4096)
        except TimeoutError:
            continue
        assert statuses(data) == [408] and b"body_deadline_s" in data
        closed = True
        break
    assert closed, "the server let a dribbling body hold the connection"
    assert time.monotonic() - started < BODY_LIMITS.body_deadline_s + 5
