"""An envgym world as an OpenEnv `Environment`, and the FastAPI app OpenEnv's `create_app` builds around it.

Each session (OpenEnv's WebSocket `/ws`, or an HTTP `/mcp` session) gets its own `EnvgymEnvironment`, so sessions
run concurrently without sharing a world. `reset(seed, task_id, attack)` and `step(EnvgymAction)` are
`ToolWorldEnv.reset`/`step`; the reward is the env's. The world's tools are also an MCP server (`mcp_server`, one
FastMCP tool per envgym tool with the same JSON schema), which OpenEnv's `/mcp` endpoint lists and calls: a call
is one agent turn of the session's episode (a call before any reset starts one, its task drawn by the env).
"""

from __future__ import annotations

import json
from typing import Any
from uuid import uuid4

from fastapi import FastAPI
from fastmcp import FastMCP
from fastmcp.tools import FunctionTool
from openenv.core.env_server.http_server import create_app
from openenv.core.env_server.interfaces import Environment

from envgym.env import ToolWorldEnv
from envgym.integrations.openenv.models import EnvgymAction, EnvgymObservation, EnvgymState
from envgym.loader import EnvironmentData, load_environment
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir, register_dir


def load_world(name: str, env_dir: str | None = None) -> EnvironmentData:
    """A registered environment's data by name (`retail`, `envgym/retail-v0`); `env_dir` registers a folder of
    environment folders first (a synthesized suite)."""
    if env_dir is not None:
        register_dir(env_dir)
    return load_environment(str(find_env_dir(name)))


class EnvgymEnvironment(Environment[EnvgymAction, EnvgymObservation, EnvgymState]):
    """One session's episode over one envgym world (see the module docstring)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, data: EnvironmentData, **env_kwargs: Any):
        super().__init__()
        self.env = ToolWorldEnv(data=data, **env_kwargs)
        self._state = EnvgymState(episode_id=str(uuid4()), step_count=0, env_name=data.name)
        self._seen = 0
        self._mcp: FastMCP | None = None

    def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
              attack: str | None = None) -> EnvgymObservation:
        options = {k: v for k, v in {"task_id": task_id, "attack": attack}.items() if v is not None}
        text, info = self.env.reset(seed=seed, options=options or None)
        self._seen = len(info["messages"])
        self._state = EnvgymState(episode_id=episode_id or str(uuid4()), step_count=0, env_name=info["env_name"],
                                  task_id=info["task_id"], world_hash=self._world_hash(), done=False)
        return EnvgymObservation(text=text, env_name=info["env_name"], task_id=info["task_id"],
                                 messages=list(info["messages"]), tools=info["tools"], done=False, reward=0.0)

    def step(self, action: EnvgymAction, timeout_s: float | None = None, **kwargs: Any) -> EnvgymObservation:
        text, reward, terminated, truncated, info = self.env.step(self._turn(action))
        new = info["messages"][self._seen:]
        self._seen = len(info["messages"])
        done = bool(terminated or truncated)
        self._state.step_count += 1
        self._state.world_hash, self._state.done = self._world_hash(), done
        return EnvgymObservation(
            text=text, env_name=info["env_name"], task_id=info["task_id"] or "", step=info["step"],
            messages=list(new), tool_errors=[None if e is None else str(e) for e in info.get("tool_errors") or []],
            truncated=bool(truncated), reward_components=info.get("reward_components", {}),
            state_hash=info.get("state_hash"), tool_call_rewards=info.get("tool_call_rewards", []),
            guard=info.get("guard", []), done=done, reward=float(reward))

    @property
    def state(self) -> EnvgymState:
        return self._state

    def close(self) -> None:
        self.env.close()

    @staticmethod
    def _turn(action: EnvgymAction) -> Any:
        """The action as ToolWorldEnv takes it: the text, or an OpenAI assistant message when calls are typed."""
        if not action.tool_calls:
            return action.content
        calls = [{"id": f"call_{i}", "type": "function",
                  "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)}}
                 for i, c in enumerate(action.tool_calls)]
        return {"role": "assistant", "content": action.content, "tool_calls": calls}

    def _world_hash(self) -> str | None:
        return self.env.state.hash() if self.env.state is not None else None

    @property
    def mcp_server(self) -> FastMCP:
        """The world's tools as a FastMCP server: the same names, descriptions and JSON schemas as
        `info["tools"]`; a call runs as one agent turn of this session's episode and returns the tool result."""
        if self._mcp is None:
            server = FastMCP(f"envgym-{self.env.data.name}")
            for schema in self.env.data.executor.openai_tools():
                fn = schema["function"]
                server.add_tool(FunctionTool(name=fn["name"], description=fn.get("description", ""),
                                             parameters=fn["parameters"], fn=self._tool_runner(fn["name"])))
            self._mcp = server
        return self._mcp

    def _tool_runner(self, name: str) -> Any:
        def run(**arguments: Any) -> str:
            if self.env.task is None:  # a call before any reset starts an episode (a task drawn by the env)
                self.reset()
            observation = self.step(EnvgymAction(content=format_tool_call(name, arguments)))
            results = [str(m.get("content") or "") for m in observation.messages if m.get("role") == "tool"]
            return "\n".join(results) or observation.text
        return run


def make_app(name: str, *, env_dir: str | None = None, max_sessions: int = 8, **env_kwargs: Any) -> FastAPI:
    """OpenEnv's app for one envgym world; each of up to `max_sessions` concurrent sessions gets its own episode."""
    data = load_world(name, env_dir)
    return create_app(lambda: EnvgymEnvironment(data, **env_kwargs), EnvgymAction, EnvgymObservation,
                      env_name=f"envgym-{data.name}", max_concurrent_envs=max_sessions, state_cls=EnvgymState)
