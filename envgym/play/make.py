"""Building a policy by name, for the CLI, benchmarks and synth rollouts: the scripted ones, the chat-model ones
and the negative controls."""

from __future__ import annotations

from typing import Any

from envgym.play.controls import NEGATIVE_CONTROLS, negative_control
from envgym.play.policies import ChatModelPolicy, OraclePolicy, Policy, RandomPolicy, RefusePolicy


def make_policy(
    name: str,
    *,
    seed: int = 0,
    base_url: str | None = None,
    model: str | None = None,
    temperature: float = 0.0,
    max_tokens: int = 256,
    reuse_prefix: bool = False,
) -> Policy:
    """Build a policy by name: oracle, random, refuse, local (SmolLM2), openai (any compatible server) or a
    negative control of `envgym.play.controls` (guess-spray, skip-auth, skip-confirm, every-write, do-nothing).
    `reuse_prefix` lets the local model reuse the attention cache of the prompt it ran last (`envgym.llm.prefix`)."""
    if name == "oracle":
        return OraclePolicy()
    if name == "random":
        return RandomPolicy(seed)
    if name == "refuse":
        return RefusePolicy()
    if name in ("local", "openai"):
        from envgym.llm import load_chat_model

        spec = "local" if name == "local" else f"openai:{model or 'default'}"
        kwargs: dict[str, Any] = {"base_url": base_url} if name == "openai" else {"reuse_prefix": reuse_prefix}
        return ChatModelPolicy(
            load_chat_model(spec, **kwargs), max_tokens=max_tokens, temperature=temperature, seed=seed
        )
    if name in NEGATIVE_CONTROLS:
        return negative_control(name, seed=seed)
    raise ValueError(
        f"unknown policy {name!r}; expected oracle, random, refuse, local, openai or one of {sorted(NEGATIVE_CONTROLS)}"
    )
