"""The one chat-model contract every backend (local, OpenAI-compatible, scripted, cached) implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass
class ChatResponse:
    """One assistant turn.

    `text` is the raw assistant text; tool calls appear in it as Hermes
    `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks. Token ids and logprobs are
    filled when the backend can give them: `completion_token_ids[i]` was sampled with log-probability
    `completion_logprobs[i]` (under the sampling temperature), and the ids include the end-of-turn token
    when one was sampled.
    """

    text: str
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_logprobs: list[float] | None = None
    usage: dict[str, int] = field(default_factory=dict)


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: OpenAI-format messages and tool schemas in, one assistant turn out.

    `temperature == 0` means greedy decoding; with `temperature > 0` the same `seed` gives the same
    reply where the backend supports seeding.
    """

    name: str

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse: ...
