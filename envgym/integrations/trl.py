"""envgym environments for TRL's `GRPOTrainer(environment_factory=...)`, its multi-turn tool-calling hook.

    EnvClass = trl_environment("retail")
    trainer = GRPOTrainer(model, args=GRPOConfig(...), train_dataset=trl_dataset("retail"),
                          environment_factory=EnvClass)

TRL makes one instance per rollout, calls `reset(**row)` with the dataset row (its `task_id` and `seed` pick the
episode; the returned text, the user's first message, is appended to the prompt), exposes every public method as a
tool (schema from the signature and docstring), runs the model's tool calls against them turn after turn, and
finally calls `get_reward()`. Each world tool becomes a method with the tool's own arguments; `send_message_to_user`
is the agent's turn to the simulated user. Every call is a `step` of the env, so the guard and the rubric apply as
in-process; the reward is the env's, graded when the episode ends (or when TRL asks for it).
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import gymnasium as gym

from envgym.env import ToolWorldEnv
from envgym.play.tool_turns import USER_TOOL, USER_TOOL_DESCRIPTION, USER_TOOL_SCHEMA, step_tool_call
from envgym.users import STOP

_JSON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list,
                               "object": dict}
RESERVED = ("reset", "get_reward")


def _env_id(name: str) -> str:
    return name if ("/" in name or ":" in name) else f"envgym/{name}-v0"


def _make_env(env_id: str, kwargs: dict[str, Any]) -> ToolWorldEnv:
    env = gym.make(env_id, disable_env_checker=True, **kwargs).unwrapped
    if not isinstance(env, ToolWorldEnv):
        raise TypeError(f"{env_id} is not an envgym tool world ({type(env).__name__})")
    return env


def _tool_method(name: str, description: str, schema: dict[str, Any]) -> Any:
    """A method `name(self, **arguments)` whose signature, annotations and Google-style docstring say the tool's
    JSON Schema, so TRL (through transformers' `get_json_schema`) shows the model the same tool."""
    properties: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))

    def method(self: Any, **arguments: Any) -> str:
        return str(self._call(name, arguments))

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = [description.strip() or name, "", "Args:"]
    for arg, spec in properties.items():
        kind = _JSON_TYPES.get(spec.get("type", "string"), str) if isinstance(spec, dict) else str
        optional = arg not in required
        annotations[arg] = kind | None if optional else kind
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY,
                                        default=None if optional else inspect.Parameter.empty,
                                        annotation=annotations[arg]))
        text = str(spec.get("description") or arg.replace("_", " ")) if isinstance(spec, dict) else arg
        if isinstance(spec, dict) and "enum" in spec:
            text += f" (choices: {json.dumps(list(spec['enum']))})"
        lines.append(f"    {arg}: {text}")
    if not properties:
        lines = lines[:-2]
    lines += ["", "Returns:", "    The tool's result."]
    annotations["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    return method


class _TrlEpisode:
    """The base of every generated class: one env, reset per rollout, stepped by tool calls."""

    env_id: str
    env_kwargs: dict[str, Any]

    def __init__(self) -> None:
        self.env = _make_env(self.env_id, self.env_kwargs)
        self.calls = 0
        self.reward: float | None = None

    def reset(self, task_id: str | None = None, seed: int | None = None, **row: Any) -> str:
        """Start the row's episode; returns the user's first message (TRL appends it to the prompt)."""
        _, info = self.env.reset(seed=seed, options={"task_id": task_id} if task_id else None)
        self.calls, self.reward = 0, None
        return str(info["messages"][1]["content"])

    def get_reward(self) -> float:
        """The episode's reward; an episode still open is ended first (the agent said all it would)."""
        if self.reward is None:
            self._call(USER_TOOL, {"message": STOP})
        return self.reward if self.reward is not None else 0.0

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.reward is not None:
            return "The episode is over; nothing was done."
        self.calls += 1
        # TRL passes absent optional arguments as None; the tool never saw them.
        given = {k: v for k, v in arguments.items() if v is not None}
        turn = step_tool_call(self.env, name, given, f"trl_{self.calls}")
        if turn.ended:
            self.reward = turn.reward
        return turn.text


def trl_environment(env: str, **env_kwargs: Any) -> type:
    """A class for `GRPOTrainer(environment_factory=...)` over environment `env` (name or gymnasium id); keyword
    arguments go to `gymnasium.make`."""
    env_id = _env_id(env)
    probe = _make_env(env_id, env_kwargs)
    tools, world_name = probe.data.world.tools, probe.data.world.name
    probe.close()
    clash = [t.name for t in tools if t.name in (*RESERVED, USER_TOOL) or t.name.startswith("_")]
    if clash:
        raise ValueError(f"{env_id}: tools {clash} clash with the names TRL's hook reserves ({', '.join(RESERVED)}, "
                         f"{USER_TOOL}, private names)")
    namespace: dict[str, Any] = {"env_id": env_id, "env_kwargs": dict(env_kwargs), "__module__": __name__}
    for tool in tools:
        namespace[tool.name] = _tool_method(tool.name, tool.description, tool.parameters)
    namespace[USER_TOOL] = _tool_method(USER_TOOL, USER_TOOL_DESCRIPTION, USER_TOOL_SCHEMA)
    # Named after the world: TRL logs the env's reward as rewards/<class name>/mean.
    name = "".join(part.capitalize() for part in world_name.replace("-", "_").split("_")) + "Env"
    return type(name, (_TrlEpisode,), namespace)


def trl_dataset(env: str, task_ids: list[str] | None = None, *, repeat: int = 1, seed: int = 0, **env_kwargs: Any) -> Any:
    """A `datasets.Dataset` of the env's tasks for GRPOTrainer: the system prompt as the prompt (the user's first
    message comes from `reset`), with `task_id` and `seed` columns that `reset` reads."""
    from datasets import Dataset

    probe = _make_env(_env_id(env), env_kwargs)
    ids = task_ids or [t.id for t in probe.data.tasks]
    system = probe.reset(seed=seed, options={"task_id": ids[0]})[1]["messages"][0]["content"]
    probe.close()
    rows = [{"prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}],
             "task_id": task, "seed": seed + i} for i, task in enumerate(ids * repeat)]
    return Dataset.from_list(rows)
