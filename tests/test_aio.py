"""`areset`/`astep` on in-process envs and the batch helpers of `envgym.play.aio`."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import gymnasium as gym
import pytest

from envgym.play.aio import areset, areset_many, astep, astep_many


def _frozen(result: Any) -> str:
    """A result as text at the time it was returned (info's message list grows with the episode)."""
    return json.dumps(result, sort_keys=True, default=str)


def test_in_process_async_calls_equal_the_sync_ones() -> None:
    sync_env, async_env = gym.make("envgym/retail-v0"), gym.make("envgym/retail-v0").unwrapped

    async def main() -> tuple[str, str]:
        reset = _frozen(await async_env.areset(seed=4))
        return reset, _frozen(await async_env.astep("Hello, how can I help?"))

    reset, step = asyncio.run(main())
    assert reset == _frozen(sync_env.reset(seed=4))
    assert step == _frozen(sync_env.step("Hello, how can I help?"))


def test_batches_step_each_env_with_its_own_action_in_order() -> None:
    envs = [gym.make("envgym/calculator-v0") for _ in range(4)]
    twins = [gym.make("envgym/calculator-v0") for _ in range(4)]
    actions = [f"turn {i}" for i in range(4)]

    async def main() -> tuple[str, str]:
        resets = _frozen(await areset_many(envs, seeds=range(4), concurrency=2))
        return resets, _frozen(await astep_many(envs, actions, concurrency=2))

    resets, steps = asyncio.run(main())
    assert resets == _frozen([t.reset(seed=i) for i, t in enumerate(twins)])
    assert steps == _frozen([t.step(a) for t, a in zip(twins, actions, strict=True)])


def test_a_wrapper_that_changes_results_is_stepped_through_its_own_step() -> None:
    env = gym.wrappers.TransformReward(gym.make("envgym/calculator-v0"), lambda r: r + 10.0)

    async def main() -> float:
        await areset(env, seed=1)
        return (await astep(env, "###STOP###"))[1]

    assert asyncio.run(main()) >= 10.0


def test_stepping_before_reset_and_mismatched_batches_are_refused() -> None:
    env = gym.make("envgym/calculator-v0")
    with pytest.raises(gym.error.ResetNeeded):
        asyncio.run(astep(env, "hi"))
    with pytest.raises(ValueError, match="one action per env"):
        asyncio.run(astep_many([env], []))
    with pytest.raises(ValueError, match="positive"):
        asyncio.run(astep_many([env], ["x"], concurrency=0))
