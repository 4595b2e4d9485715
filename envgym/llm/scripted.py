"""Deterministic chat models for tests and oracles: canned replies or a function of the conversation."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from envgym.llm.base import ChatResponse

ReplyFn = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str]


class ScriptedChatModel:
    """Replies with `replies[0]`, `replies[1]`, ... in call order, or with `reply_fn(messages, tools)`.

    Running past the end of `replies` raises IndexError naming how many replies were scripted, so a test
    that makes more calls than it planned fails loudly instead of looping.
    """

    def __init__(
        self,
        replies: Sequence[str] | None = None,
        *,
        reply_fn: ReplyFn | None = None,
        name: str = "scripted",
    ) -> None:
        if (replies is None) == (reply_fn is None):
            raise ValueError("ScriptedChatModel needs exactly one of `replies` or `reply_fn`")
        self.name = name
        self._replies = list(replies) if replies is not None else None
        self._reply_fn = reply_fn
        self.calls: list[list[dict[str, Any]]] = []

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        """Return the next scripted reply; sampling parameters are ignored (the script is the policy)."""
        index = len(self.calls)
        self.calls.append([dict(m) for m in messages])
        if self._reply_fn is not None:
            return ChatResponse(text=self._reply_fn(messages, tools))
        assert self._replies is not None
        if index >= len(self._replies):
            raise IndexError(
                f"ScriptedChatModel {self.name!r} was called {index + 1} times but only "
                f"{len(self._replies)} replies were scripted"
            )
        return ChatResponse(text=self._replies[index])
