"""The env half: one verifiers episode is one envgym episode, stepped host-side with the model's replies."""

from __future__ import annotations

import json
from typing import Any

import verifiers.v1 as vf

from envgym.integrations.verifiers.taskset import EnvgymData, make_env
from envgym.users import STOP

REWARD = "envgym_reward"


class EnvgymEnvConfig(vf.EnvConfig):
    # The harness runs in-process and executes nothing, so the local runtime is enough (the default is a sandbox).
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())


def _action(segment: Any) -> dict[str, Any]:
    """The segment's reply as the env's action: an OpenAI assistant message (text, and its tool calls if any)."""
    reply = next((m for m in reversed(segment.messages) if isinstance(m, vf.AssistantMessage)), None)
    if reply is None:
        return {"role": "assistant", "content": ""}
    action: dict[str, Any] = {"role": "assistant", "content": reply.content or ""}
    if reply.tool_calls:
        action["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                for c in reply.tool_calls]
    return action


class EnvgymEnv(vf.Env[EnvgymEnvConfig]):
    async def run(self, task: vf.Task, agents: vf.Agents) -> None:
        data = task.data
        if not isinstance(data, EnvgymData):
            raise TypeError(f"EnvgymEnv plays EnvgymTaskset's tasks, not a {type(data).__name__}")
        env = make_env(data.env, data.max_steps)
        try:
            _, info = await env.areset(seed=data.seed, options={"task_id": data.task_id})
            opening = [str(m["content"]) for m in info["messages"][:2]]
            if opening != [data.system_prompt, data.prompt]:
                raise RuntimeError(f"{data.env}: task {data.task_id!r} (seed {data.seed}) no longer opens as the "
                                   f"taskset recorded it; the env is not deterministic by seed")
            actions: list[dict[str, Any]] = []
            reward, ended = 0.0, ""
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    actions.append(_action(segment))
                    seen = len(env.messages)
                    _, r, terminated, truncated, info = await env.astep(actions[-1])
                    if terminated or truncated:
                        reward, ended = float(r), "terminated" if terminated else "truncated"
                        break
                    # What the env answered after its copy of the reply: tool results, or the user's next message.
                    segment = await interaction.turn(env.messages[seen + 1:])
            if not ended:
                # The run ended first (a turn or token limit, a harness failure): the agent said all it would, so
                # the episode ends here and is graded on what it did.
                actions.append({"role": "assistant", "content": STOP})
                _, r, _, _, info = await env.astep(actions[-1])
                reward, ended = float(r), "agent_stopped"
            trace = interaction.trace
            trace.record_reward(REWARD, reward)
            trace.record_metric("envgym_steps", len(actions))
            state = env.state
            trace.info["envgym"] = {
                "task_id": data.task_id, "seed": data.seed, "ended": ended, "actions": actions,
                "reward_components": json.loads(json.dumps(info.get("reward_components", {}), default=str)),
                "state_hash": state.hash() if state is not None else None,
            }
        finally:
            env.close()
