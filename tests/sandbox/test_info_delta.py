"""Info deltas: a tool world's step answers carry only the conversation's new messages, and the client puts the rest
back, so every step's info is the one the env gives in-process (see envgym.sandbox.wire)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from envgym.play.policies import OraclePolicy
from envgym.remote import RemoteEnv, RemoteEnvError
from envgym.sandbox.errors import InvalidRequestError
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.wire import EnvCreate, HeldInfo
from tests.sandbox.serving import Served, start_serve


@pytest.fixture(scope="module", params=[(), ("--workers", "2")], ids=["one-process", "workers"])
def served(request: pytest.FixtureRequest) -> Iterator[Served]:
    server = start_serve(*request.param, env="retail")
    yield server
    assert server.stop(wait_s=60) == 0  # workers drain first; a loaded machine is slow at it


def _task_ids(count: int) -> list[str]:
    return [t.id for t in gym.make("envgym/retail-v0").unwrapped.data.tasks[:count]]


def _timeless(result: tuple[Any, ...]) -> tuple[Any, ...]:
    """A step's result without the info's `wall_s` (the episode's wall time, different on every run)."""
    info = {k: v for k, v in result[-1].items() if k != "wall_s"}
    return (*result[:-1], info)


def _answers(env: RemoteEnv) -> list[bytes]:
    """Every raw answer `env` receives from now on (the client's own bytes, observed, not replaced)."""
    seen: list[bytes] = []
    call = env._call

    def recorded(what: str, path: str, body: dict[str, Any]) -> bytes:
        raw = call(what, path, body)
        seen.append(raw)
        return raw

    env._call = recorded  # type: ignore[method-assign]
    return seen


def test_retail_episodes_over_serve_match_in_process_step_for_step_with_small_answers(served: Served) -> None:
    local = gym.make("envgym/retail-v0")
    remote = RemoteEnv(served.url, token_file=served.token_file)
    answers = _answers(remote)
    for seed, task in enumerate(_task_ids(3)):
        policy, options = OraclePolicy(), {"task_id": task}
        obs, info = local.reset(seed=seed, options=options)
        assert remote.reset(seed=seed, options=options) == (obs, info)
        done = False
        while not done:
            action = policy.act(obs, info)
            expected = local.step(action)
            assert _timeless(remote.step(action)) == _timeless(expected)
            obs, _, terminated, truncated, info = expected
            done = terminated or truncated
        assert len(info["messages"]) > 4
    steps = [json.loads(raw) for raw in answers if b'"reward"' in raw]
    assert all("messages_from" in s and s["info"]["tools"] is None and s["tools_held"] for s in steps)
    assert all(len(s["info"]["messages"]) <= 3 for s in steps)  # the step's own messages, never the conversation
    full = len(json.dumps(info))
    assert max(len(raw) for raw in answers if b'"reward"' in raw) < full / 3
    remote.close()


def test_a_client_that_missed_an_answer_is_put_right_by_the_next(served: Served) -> None:
    local = gym.make("envgym/retail-v0")
    remote = RemoteEnv(served.url, token_file=served.token_file)
    task = _task_ids(1)[0]
    obs, info = local.reset(seed=1, options={"task_id": task})
    remote.reset(seed=1, options={"task_id": task})
    policy = OraclePolicy()
    for lost in (True, False, True, False):
        action = policy.act(obs, info)
        if lost:  # the server steps, the answer never reaches the client (as after a timeout)
            remote._call("step", f"/v1/env/sessions/{remote.session_id}/step", remote._step_body(action))
            obs, _, _, _, info = local.step(action)
        else:
            obs, _, _, _, info = expected = local.step(action)
            assert _timeless(remote.step(action)) == _timeless(expected)
    remote.close()


def test_the_host_sends_a_delta_only_for_the_episode_and_messages_the_client_holds() -> None:
    host = EnvHost("envgym/retail-v0")
    session = host.create(EnvCreate()).session_id
    reset = json.loads(host.reset(session, 0, None, info_delta=True))
    held = HeldInfo(episode=reset["episode"], messages=len(reset["info"]["messages"]))
    step = json.loads(host.step(session, "Hello", held))
    assert step["messages_from"] == held.messages and step["info"]["messages"][0]["content"] == "Hello"
    stale = json.loads(host.step(session, "Again", held))  # holds fewer messages than were sent: from there on
    assert stale["messages_from"] == held.messages and stale["info"]["messages"][0]["content"] == "Hello"
    other = json.loads(host.step(session, "More", HeldInfo(episode=reset["episode"] + 7, messages=2)))
    assert "messages_from" not in other and other["info"]["tools"] and other["episode"] != reset["episode"]
    assert [m["content"] for m in other["info"]["messages"][2:] if m["role"] == "assistant"] == ["Hello", "Again", "More"]
    too_many = json.loads(host.step(session, "Last", HeldInfo(episode=other["episode"], messages=999)))
    assert "messages_from" not in too_many and len(too_many["info"]["messages"]) == 10
    plain = json.loads(host.step(session, "No delta asked"))
    assert set(plain) == {"observation", "reward", "terminated", "truncated", "info"}


def test_an_env_that_does_not_promise_append_only_messages_is_sent_whole() -> None:
    host = EnvHost("CartPole-v1")
    session = host.create(EnvCreate()).session_id
    episode = json.loads(host.reset(session, 0, None, info_delta=True))["episode"]
    step = json.loads(host.step(session, 1, HeldInfo(episode=episode, messages=0)))
    assert "messages_from" not in step and step["info"] == {}


class _OlderServer:
    """A sandbox client whose server predates info deltas: it refuses the field as an unknown one, as v1 did."""

    def __init__(self) -> None:
        self.host, self.refused = EnvHost("envgym/retail-v0"), 0

    def request(self, method: str, path: str, content: bytes | None = None) -> Any:
        body = json.loads(content or b"{}")
        if path == "/v1/env/sessions" and method == "POST":
            raw = self.host.create(EnvCreate.model_validate(body)).model_dump_json().encode()
        elif path.endswith("/reset"):
            if "info_delta" in body:
                self.refused += 1
                raise InvalidRequestError(f"{path}: info_delta: Extra inputs are not permitted")
            raw = self.host.reset(path.split("/")[-2], body["seed"], body["options"])
        elif path.endswith("/step"):
            assert "held" not in body
            raw = self.host.step(path.split("/")[-2], body["action"])
        else:
            raw = b"{}"
        return type("Answer", (), {"content": raw})()


def test_a_server_without_info_deltas_is_asked_once_and_then_used_as_before() -> None:
    older = _OlderServer()
    remote = RemoteEnv("older", client=older)  # type: ignore[arg-type]
    local = gym.make("envgym/retail-v0")
    for seed in (0, 1):
        assert remote.reset(seed=seed) == local.reset(seed=seed)
        assert remote.step("Hello") == local.step("Hello")
    assert older.refused == 1


def test_an_answer_that_does_not_fit_what_the_client_holds_is_an_error_naming_it(served: Served) -> None:
    remote = RemoteEnv(served.url, token_file=served.token_file)
    remote.reset(seed=0)
    assert remote._held is not None
    remote._held.messages.append({"role": "user", "content": "not from the server"})
    body = remote._step_body("Hello")
    body["held"]["messages"] -= 1  # the server is told the truth, the client's copy is off by one
    raw = remote._call("step", f"/v1/env/sessions/{remote.session_id}/step", body)
    with pytest.raises(RemoteEnvError, match="do not extend the ones this client holds; reset the env"):
        remote._step_done(raw)
    assert remote.reset(seed=0) == gym.make("envgym/retail-v0").reset(seed=0)
    remote.close()
