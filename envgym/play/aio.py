"""Env calls from an asyncio loop: `areset`/`astep` on any Gymnasium env, and batches that step many envs at once.

An env with its own `areset`/`astep` (ToolWorldEnv, RemoteEnv) is awaited directly, also through the wrappers
`gymnasium.make` adds that do not change results (order enforcing, the passive checker); any other env or wrapper
runs its synchronous call on a worker thread. Either way the loop is never blocked.

    envs = [envgym.RemoteEnv(url, token_file=f) for _ in range(64)]
    await areset_many(envs, seeds=range(64))
    results = await astep_many(envs, actions)   # one (obs, reward, terminated, truncated, info) per env
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

import gymnasium as gym
from gymnasium.wrappers import OrderEnforcing, PassiveEnvChecker

StepResult = tuple[Any, float, bool, bool, dict[str, Any]]
ResetResult = tuple[Any, dict[str, Any]]
_T = TypeVar("_T")

# Wrappers that pass reset and step through unchanged once the env is reset; their env's own async calls may be
# used instead. Any other wrapper changes something, so its synchronous call runs on a thread.
_TRANSPARENT = (OrderEnforcing, PassiveEnvChecker)


def _native(env: Any, name: str) -> tuple[list[OrderEnforcing], Any] | None:
    """The env's own async method `name` and the order-enforcing wrappers around it, or None when a wrapper that
    changes results (or the env itself) has no such method."""
    orders: list[OrderEnforcing] = []
    inner = env
    while isinstance(inner, gym.Wrapper):
        if not isinstance(inner, _TRANSPARENT):
            return None
        if isinstance(inner, OrderEnforcing):
            orders.append(inner)
        inner = inner.env
    method = getattr(inner, name, None)
    return (orders, method) if method is not None else None


async def areset(env: Any, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetResult:
    """`env.reset(seed=, options=)` without blocking the loop."""
    native = _native(env, "areset")
    if native is None:
        return await asyncio.to_thread(env.reset, seed=seed, options=options)
    orders, method = native
    for wrapper in orders:
        wrapper._has_reset = True  # what its own reset records
    result: ResetResult = await method(seed=seed, options=options)
    return result


async def astep(env: Any, action: Any) -> StepResult:
    """`env.step(action)` without blocking the loop."""
    native = _native(env, "astep")
    if native is None:
        obs, reward, terminated, truncated, info = await asyncio.to_thread(env.step, action)
    else:
        orders, method = native
        if not all(wrapper._has_reset for wrapper in orders):
            raise gym.error.ResetNeeded("Cannot call env.step() before calling env.reset()")
        obs, reward, terminated, truncated, info = await method(action)
    return obs, float(reward), bool(terminated), bool(truncated), info


async def _bounded(calls: Iterable[Awaitable[_T]], concurrency: int | None) -> list[_T]:
    if concurrency is None:
        return list(await asyncio.gather(*calls))
    if concurrency < 1:
        raise ValueError(f"concurrency: expected a positive number of calls at once, got {concurrency}")
    gate = asyncio.Semaphore(concurrency)

    async def one(call: Awaitable[_T]) -> _T:
        async with gate:
            return await call

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def areset_many(envs: Sequence[Any], *, seeds: Iterable[int | None] | None = None,
                      options: Sequence[dict[str, Any] | None] | None = None,
                      concurrency: int | None = None) -> list[ResetResult]:
    """Reset every env at once (at most `concurrency` calls in flight); `seeds` and `options` go one per env."""
    seed_list = list(seeds) if seeds is not None else [None] * len(envs)
    option_list = list(options) if options is not None else [None] * len(envs)
    if not len(seed_list) == len(option_list) == len(envs):
        raise ValueError(f"areset_many: {len(envs)} envs, but {len(seed_list)} seeds and {len(option_list)} options")
    calls = (areset(e, seed=s, options=o) for e, s, o in zip(envs, seed_list, option_list, strict=True))
    return await _bounded(calls, concurrency)


async def astep_many(envs: Sequence[Any], actions: Sequence[Any], *,
                     concurrency: int | None = None) -> list[StepResult]:
    """Step every env with its action at once (at most `concurrency` calls in flight); results in env order."""
    if len(actions) != len(envs):
        raise ValueError(f"astep_many: {len(envs)} envs but {len(actions)} actions; give one action per env")
    return await _bounded((astep(e, a) for e, a in zip(envs, actions, strict=True)), concurrency)
