"""`EnvgymTextEnv`: one envgym world as a SkyRL-gym text env (see the package docstring).

The env owns the conversation, as SkyRL's multi-turn envs do: `init` ignores the dataset prompt's content and
returns the episode's system prompt (with the tools described in the env's tool-call format) and the user's opening;
each `step` takes the model's text turn and returns the new messages (tool results, or the user's reply) as
`observations`. The reward is the env's: 0 until the episode ends, then the rubric's. `metadata` carries the
reward components, the state hash and the tool errors, as `info` does in Gymnasium.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from skyrl_gym import registry as skyrl_registry
from skyrl_gym.envs import register as skyrl_register
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput, ConversationType

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.protocol import renderer
from envgym.registry import find_env_dir, registered_ids

PREFIX = "envgym-"


def _options(config: Any) -> dict[str, Any]:
    """SkyRL passes an OmegaConf config or a dict (or None)."""
    if config is None:
        return {}
    if isinstance(config, Mapping):
        return dict(config)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(config, resolve=True)
    return {str(k): v for k, v in plain.items()} if isinstance(plain, dict) else {}


class EnvgymTextEnv(BaseTextEnv):
    """An envgym world in SkyRL-gym. `env_config` may set `max_steps`, `guard`, `confirm` and `tool_format`
    (ToolWorldEnv's arguments); `extras` (a dataset row's) names the episode: `task_id`, `seed`, `attack`."""

    def __init__(self, env_name: str, env_config: Any = None, extras: Mapping[str, Any] | None = None):
        super().__init__()
        config = _options(env_config)
        allowed = {"max_steps", "guard", "confirm", "tool_format"}
        unknown = sorted(set(config) - allowed)
        if unknown:
            raise ValueError(f"envgym env_config: unknown keys {unknown}; expected some of {sorted(allowed)}")
        self.env = ToolWorldEnv(data=load_environment(str(find_env_dir(env_name))), **config)
        extras = dict(extras or {})
        self.task_id = extras.get("task_id") or extras.get("extra_info", {}).get("task_id")
        self.seed = extras.get("seed", extras.get("extra_info", {}).get("seed"))
        self.attack = extras.get("attack")
        self.max_turns = int(config.get("max_steps") or self.env.data.world.max_steps)
        self._seen = 0

    def init(self, prompt: ConversationType) -> tuple[ConversationType, dict[str, Any]]:
        options = {k: v for k, v in {"task_id": self.task_id, "attack": self.attack}.items() if v is not None}
        _, info = self.env.reset(seed=self.seed, options=options or None)
        self._seen = len(info["messages"])
        self.turns = 0
        tools_prompt = renderer(self.env.tool_format).tools_prompt(info["tools"])
        system, opening = info["messages"][0], info["messages"][1]
        conversation = [{"role": "system", "content": f"{system['content']}\n\n{tools_prompt}"}, dict(opening)]
        return conversation, {"env_name": info["env_name"], "task_id": info["task_id"], "tools": info["tools"]}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        _, reward, terminated, truncated, info = self.env.step(action)
        messages = info["messages"]
        new = [dict(m) for m in messages[self._seen + 1:]]  # after the model's own turn, which SkyRL already holds
        self._seen = len(messages)
        done = bool(terminated or truncated)
        metadata = {"task_id": info["task_id"], "step": info["step"],
                    "tool_errors": [None if e is None else str(e) for e in info.get("tool_errors") or []],
                    "truncated": bool(truncated)}
        if done:
            metadata.update({k: info[k] for k in ("reward_components", "state_hash", "tool_call_rewards", "guard")
                             if k in info})
        return BaseTextEnvStepOutput(observations=new, reward=float(reward), done=done, metadata=metadata,
                                     postprocessed_action=None)

    def close(self) -> None:
        self.env.close()


def register_worlds() -> list[str]:
    """Register every envgym environment with a folder (bundled, and those registered with `register_dir`) in
    SkyRL-gym's registry as `envgym-<name>`; returns the SkyRL ids. Registering again is a no-op."""
    ids = []
    for eid in registered_ids():
        if "env_dir" not in (gym.registry[eid].kwargs or {}):
            continue  # a remote env or a built-in one without a world folder
        name = eid.split("/", 1)[-1].rsplit("-v", 1)[0]
        skyrl_id = PREFIX + name
        if skyrl_id not in skyrl_registry:
            skyrl_register(id=skyrl_id, entry_point="envgym.integrations.skyrl.env:EnvgymTextEnv",
                           kwargs={"env_name": name})
        ids.append(skyrl_id)
    return ids


def dataset_rows(name: str, *, seed: int = 0) -> list[dict[str, Any]]:
    """One SkyRL dataset row per task of world `name`: `env_class`, the episode's extras and a prompt that only
    names the task. `init` replaces the prompt by the episode's own system prompt and user opening, so the task's
    hidden instruction never reaches the dataset or the model."""
    data = load_environment(str(find_env_dir(name)))
    return [{"data_source": f"envgym/{data.name}", "env_class": PREFIX + data.name,
             "prompt": [{"role": "user", "content": f"envgym task {task.id}"}],
             "task_id": task.id, "seed": seed + i, "extra_info": {"task_id": task.id, "seed": seed + i}}
            for i, task in enumerate(data.tasks)]
