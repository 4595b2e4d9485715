"""Policies: what picks the agent's next turn. Scripted ones (oracle, random, refuse) and a chat-model one.

A policy is anything with `act(obs, info) -> action` (text or an OpenAI assistant message dict).
"""

from __future__ import annotations

import random
from typing import Any, Protocol

from envgym.loader import EnvironmentData, load_environment
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir
from envgym.scripted import scripted_turns
from envgym.users import STOP


class Policy(Protocol):
    def act(self, obs: str, info: dict[str, Any]) -> str | dict[str, Any]: ...


def _turns_taken(info: dict[str, Any]) -> int:
    return sum(1 for m in info["messages"] if m["role"] == "assistant")


class OraclePolicy:
    """Replays the task's reference solution one call per turn, keeping the world's policy rules, then says the
    reference final reply (`envgym.scripted`): where the rules want it, it asks the user before each write.

    It reads the hidden task, so it is for tests and for proving tasks solvable, never for evaluation.
    `authenticate=False` and `confirm=False` make the skip-authentication and skip-confirmation controls.
    """

    def __init__(self, data: EnvironmentData | None = None, *, authenticate: bool = True, confirm: bool = True):
        self.data = data
        self.authenticate = authenticate
        self.confirm = confirm

    def _data(self, info: dict[str, Any]) -> EnvironmentData:
        return self.data or load_environment(str(find_env_dir(info["env_name"])))

    def act(self, obs: str, info: dict[str, Any]) -> str:
        data = self._data(info)
        turns = scripted_turns(data.world, data.task(info["task_id"]), authenticate=self.authenticate,
                               confirm=self.confirm)
        turn = _turns_taken(info)
        return turns[turn] if turn < len(turns) else f"Goodbye. {STOP}"


class RefusePolicy:
    """Always replies the same refusal (the do-nothing baseline every task must fail)."""

    def __init__(self, text: str = "I cannot help with that."):
        self.text = text

    def act(self, obs: str, info: dict[str, Any]) -> str:
        return self.text


def _random_value(schema: dict[str, Any], rng: random.Random) -> Any:
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = rng.choice(kind)
    if kind == "integer":
        return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 10)))
    if kind == "number":
        return round(rng.uniform(schema.get("minimum", 0), schema.get("maximum", 10)), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_random_value(schema.get("items", {}), rng) for _ in range(rng.randint(0, 2))]
    if kind == "object":
        return {k: _random_value(v, rng) for k, v in schema.get("properties", {}).items()}
    return rng.choice(["x", "#W0001", "U0001", "R0001", "HAT001", "1 + 1", "test@example.com"])


class RandomPolicy:
    """Calls a random tool with random schema-typed arguments, or replies; seeded."""

    def __init__(self, seed: int = 0, reply_prob: float = 0.2):
        self.rng = random.Random(seed)
        self.reply_prob = reply_prob

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if self.rng.random() < self.reply_prob:
            return self.rng.choice(["Could you tell me more?", "Can you confirm your email?", "Done."])
        fn = self.rng.choice(info["tools"])["function"]
        args = _random_value(fn["parameters"], self.rng)
        return format_tool_call(fn["name"], args if isinstance(args, dict) else {})


class ChatModelPolicy:
    """Asks a chat model for the next turn from the conversation so far (tools described in the prompt)."""

    def __init__(self, model: Any, max_tokens: int = 256, temperature: float = 0.0, seed: int | None = None):
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.tokens = 0

    def act(self, obs: str, info: dict[str, Any]) -> str:
        reply = self.model.chat(
            info["messages"],
            info["tools"],
            max_tokens=self.max_tokens,
            temperature=self.temperature,
            seed=self.seed,
        )
        self.tokens += int(reply.usage.get("prompt_tokens", 0)) + int(reply.usage.get("completion_tokens", 0))
        return str(reply.text)


def make_policy(
    name: str,
    *,
    seed: int = 0,
    base_url: str | None = None,
    model: str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 256,
) -> Policy:
    """Build a policy by name: oracle, random, refuse, local (SmolLM2), openai (any compatible server) or a
    negative control of `envgym.controls` (guess-spray, skip-auth, skip-confirm, every-write, do-nothing)."""
    from envgym.controls import NEGATIVE_CONTROLS, negative_control  # controls build on the policies here

    if name == "oracle":
        return OraclePolicy()
    if name == "random":
        return RandomPolicy(seed)
    if name == "refuse":
        return RefusePolicy()
    if name in ("local", "openai"):
        from envgym.llm import load_chat_model

        spec = "local" if name == "local" else f"openai:{model or 'default'}"
        kwargs = {"base_url": base_url} if name == "openai" else {}
        return ChatModelPolicy(
            load_chat_model(spec, **kwargs), max_tokens=max_tokens, temperature=temperature, seed=seed
        )
    if name in NEGATIVE_CONTROLS:
        return negative_control(name, seed=seed)
    raise ValueError(
        f"unknown policy {name!r}; expected oracle, random, refuse, local, openai or one of {sorted(NEGATIVE_CONTROLS)}"
    )
