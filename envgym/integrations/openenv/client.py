"""OpenEnv's `EnvClient` typed for envgym worlds, and an oracle player over it (what `play` and the tests run).

The player keeps the conversation from the observations alone (reset's messages, then each step's new ones), so the
policy sees exactly the `info` an in-process episode gives it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult

from envgym.integrations.openenv.models import EnvgymAction, EnvgymObservation, EnvgymState, EnvgymToolCall
from envgym.integrations.openenv.server import load_world
from envgym.loader import EnvironmentData
from envgym.play.policies import OraclePolicy
from envgym.protocol import parse_action, strip_tool_calls


class EnvgymClient(EnvClient[EnvgymAction, EnvgymObservation, EnvgymState]):
    """A session with an envgym world served by `envgym.integrations.openenv.server` (one episode at a time)."""

    def _step_payload(self, action: EnvgymAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[EnvgymObservation]:
        observation = EnvgymObservation.model_validate(
            {**payload.get("observation", {}), "done": payload.get("done", False), "reward": payload.get("reward")})
        return StepResult(observation=observation, reward=payload.get("reward"), done=payload.get("done", False),
                          metadata=payload.get("metadata"))

    def _parse_state(self, payload: dict[str, Any]) -> EnvgymState:
        return EnvgymState.model_validate(payload)


def typed_action(text: str) -> EnvgymAction:
    """A text turn as a typed action: its tool calls as `tool_calls`, the rest as `content` (a turn whose calls
    do not parse stays text, so the env answers it with its own error observation)."""
    _, calls = parse_action(text)
    if not calls or any(c.error is not None for c in calls):
        return EnvgymAction(content=text)
    return EnvgymAction(content=strip_tool_calls(text).strip(),
                        tool_calls=[EnvgymToolCall(name=c.name, arguments=dict(c.arguments)) for c in calls])


async def play_oracle(base_url: str, data: EnvironmentData, task_id: str, seed: int, *,
                      typed: bool = False) -> dict[str, Any]:
    """One oracle episode over OpenEnv's client (its turns as typed tool calls with `typed`): the reward,
    components, step count and final state hash."""
    policy = OraclePolicy(data)
    async with EnvgymClient(base_url=base_url) as client:
        result = await client.reset(seed=seed, task_id=task_id)
        first = result.observation
        info: dict[str, Any] = {"env_name": first.env_name, "task_id": first.task_id, "messages": list(first.messages),
                                "tools": first.tools, "tool_errors": []}
        text, steps = first.text, 0
        while not result.done:
            turn = str(policy.act(text, info))
            result = await client.step(typed_action(turn) if typed else EnvgymAction(content=turn))
            observation, steps = result.observation, steps + 1
            info["messages"].extend(observation.messages)
            info["tool_errors"] = observation.tool_errors
            text = observation.text
        state = await client.state()
    return {"task_id": task_id, "seed": seed, "typed": typed, "reward": result.reward, "steps": steps,
            "components": observation.reward_components, "state_hash": observation.state_hash,
            "world_hash": state.world_hash, "messages": len(info["messages"])}


async def play_jobs(jobs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every job ({"env", "url", "task", "seed", "env_dir", "typed"}) at once, one session each: concurrent sessions on
    one or several servers. Rows come back in job order, each naming its env."""
    worlds: dict[str, EnvironmentData] = {}
    for job in jobs:
        if job["env"] not in worlds:
            worlds[job["env"]] = load_world(job["env"], job.get("env_dir"))

    async def play(job: dict[str, Any]) -> dict[str, Any]:
        row = await play_oracle(job["url"], worlds[job["env"]], job["task"], int(job.get("seed") or 0),
                                typed=bool(job.get("typed")))
        return {"env": job["env"], **row}

    return list(await asyncio.gather(*(play(job) for job in jobs)))
