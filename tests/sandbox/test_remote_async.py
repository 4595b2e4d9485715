"""RemoteEnv's asyncio calls against a real `envgym serve`: 64 sessions stepped at once from one event loop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from envgym.play.aio import areset, areset_many, astep, astep_many
from envgym.play.policies import OraclePolicy
from envgym.remote import RemoteEnv, RemoteEnvError
from envgym.sandbox.akeepalive import AsyncKeepAliveClient
from tests.sandbox.serving import Served, start_serve

SESSIONS = 64
TURNS = 3  # oracle turns per session: enough to reach tool calls and the user, short enough for a loaded machine


@pytest.fixture(scope="module")
def served() -> Iterator[Served]:
    server = start_serve(env="retail")
    yield server
    assert server.stop() == 0


def _tasks() -> list[str]:
    env = gym.make("envgym/retail-v0", disable_env_checker=True).unwrapped
    return [t.id for t in env.data.tasks]


def _in_process(env: gym.Env[Any, Any], seed: int, task: str) -> str:
    """The conversation after the oracle's first `TURNS` turns on `task`, in-process."""
    policy = OraclePolicy()
    obs, info = env.reset(seed=seed, options={"task_id": task})
    for _ in range(TURNS):
        obs, _, _, _, info = env.step(policy.act(obs, info))
    return json.dumps(info["messages"], sort_keys=True)


@pytest.mark.slow
def test_64_remote_sessions_step_concurrently_from_one_loop(served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    tasks = _tasks()
    chosen = [tasks[i % len(tasks)] for i in range(SESSIONS)]
    in_flight, peak = 0, 0
    real_request = AsyncKeepAliveClient.request

    async def counted(self: AsyncKeepAliveClient, method: str, path: str, body: bytes = b"") -> Any:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real_request(self, method, path, body)
        finally:
            in_flight -= 1

    monkeypatch.setattr(AsyncKeepAliveClient, "request", counted)
    envs = [RemoteEnv(served.url, token_file=served.token_file, timeout_s=120) for _ in range(SESSIONS)]
    policies = [OraclePolicy() for _ in envs]

    async def main() -> tuple[list[str], int]:
        ticks = 0
        stop = asyncio.Event()

        async def heartbeat() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0.001)

        beat = asyncio.create_task(heartbeat())
        resets = await areset_many(envs, seeds=range(SESSIONS), options=[{"task_id": t} for t in chosen])
        latest: list[tuple[Any, dict[str, Any]]] = list(resets)
        for _ in range(TURNS):
            actions = [policy.act(*seen) for policy, seen in zip(policies, latest, strict=True)]
            results = await astep_many(envs, actions)
            latest = [(obs, info) for obs, _, _, _, info in results]
        stop.set()
        await beat
        await asyncio.gather(*(env.aclose() for env in envs))
        return [json.dumps(info["messages"], sort_keys=True) for _, info in latest], ticks

    conversations, ticks = asyncio.run(main())
    local = gym.make("envgym/retail-v0")
    assert conversations == [_in_process(local, i, task) for i, task in enumerate(chosen)]
    assert peak > 1, "requests never overlapped: the sessions were stepped one at a time"
    assert ticks > 0, "the event loop was blocked while the sessions were stepped"
    assert all(env._client is None for env in envs)


def test_async_calls_match_the_sync_ones_and_report_a_dead_server(served: Served) -> None:
    env = RemoteEnv(served.url, token_file=served.token_file)
    wrapped = gym.make("envgym/remote-v0", url=served.url, token_file=served.token_file)

    def frozen(result: Any) -> str:
        return json.dumps(result, sort_keys=True)

    async def main() -> tuple[str, str, str, str]:
        first = frozen(await env.areset(seed=3))
        step = frozen(await env.astep("hello"))
        via_make = frozen(await areset(wrapped, seed=3))
        return first, step, via_make, frozen(await astep(wrapped, "hello"))

    first, step, via_make, wrapped_step = asyncio.run(main())
    assert frozen(env.reset(seed=3)) == first and frozen(env.step("hello")) == step
    assert via_make == first and wrapped_step == step
    env.close()
    wrapped.close()
    with pytest.raises(RemoteEnvError, match="closed"):
        asyncio.run(env.astep("hello"))


def test_async_calls_go_to_the_sessions_worker() -> None:
    server = start_serve("--workers", "2")
    try:
        envs = [RemoteEnv(server.url, token_file=server.token_file) for _ in range(4)]
        twins = [gym.make("envgym/calculator-v0") for _ in envs]

        async def main() -> tuple[str, str]:
            resets = json.dumps(await areset_many(envs, seeds=range(4)), sort_keys=True)
            steps = json.dumps(await astep_many(envs, ["hello"] * 4), sort_keys=True)
            await asyncio.gather(*(env.aclose() for env in envs))
            return resets, steps

        resets, steps = asyncio.run(main())
        assert resets == json.dumps([t.reset(seed=i) for i, t in enumerate(twins)], sort_keys=True)
        assert steps == json.dumps([t.step("hello") for t in twins], sort_keys=True)
    finally:
        assert server.stop() == 0


def test_every_step_of_a_retail_episode_gives_the_whole_conversation(served: Served) -> None:
    """A whole retail episode through the env server: after every step, sync and async alike, RemoteEnv's answer is
    the in-process env's byte for byte (the clock field aside), whatever the caller did to the last answer."""
    local = gym.make("envgym/retail-v0")
    remote = RemoteEnv(served.url, token_file=served.token_file)
    policy = OraclePolicy()
    options = {"task_id": _tasks()[1]}
    obs, info = remote.reset(seed=5, options=options)
    assert (obs, info) == local.reset(seed=5, options=options)
    steps, done = 0, False
    while not done and steps < 40:
        action = policy.act(obs, info)
        info["messages"].append({"role": "user", "content": "changed by the caller"})  # must not reach the next
        answer = remote.step(action) if steps % 2 else asyncio.run(remote.astep(action))
        expected = local.step(action)
        assert json.dumps(answer[4]["messages"]) == json.dumps(expected[4]["messages"]), f"step {steps}"
        timeless = [{k: v for k, v in got[4].items() if k != "wall_s"} for got in (answer, expected)]  # a clock
        assert json.dumps([*answer[:4], timeless[0]]) == json.dumps([*expected[:4], timeless[1]])
        obs, _, terminated, truncated, info = answer
        steps, done = steps + 1, terminated or truncated
    assert done and len(info["messages"]) > 6
    remote.close()
