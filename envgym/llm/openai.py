"""Any OpenAI-compatible chat-completions server (vLLM, Ollama, OpenAI) over httpx.

Tool calls the server returns in `message.tool_calls` are turned back into Hermes `<tool_call>` text
blocks appended to the reply text, so `ChatResponse.text` is the single place a caller (the env, the
trainer) reads actions from, whatever the backend.
"""

from __future__ import annotations

import os
from typing import Any

import httpx

from envgym.llm.base import ChatResponse
from envgym.llm.chat_template import hermes_tool_call_text


class OpenAIServerError(RuntimeError):
    """The server answered with an error status or a body that is not a chat completion."""


class OpenAIChatModel:
    """Chat completions from `base_url` (e.g. `http://localhost:8000/v1`).

    With `token_ids=True` the request also asks for the sampled token ids and their logprobs the way
    vLLM provides them (`logprobs`, `return_tokens_as_token_ids`, `return_token_ids`); they are filled
    into the response when the server returns them and left None otherwise. The API key comes from
    `api_key` or the environment variable named by `api_key_env`; no key means no Authorization header
    (local vLLM/Ollama).
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "http://localhost:8000/v1",
        api_key: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        token_ids: bool = False,
        timeout_s: float = 120.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.model = model
        self.name = f"openai:{model}"
        self.base_url = base_url.rstrip("/")
        self.token_ids = token_ids
        key = api_key if api_key is not None else os.environ.get(api_key_env)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = client or httpx.Client(timeout=timeout_s, headers=headers)

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        """One reply from the server."""
        return self.generate_group(
            messages, 1, tools, max_tokens=max_tokens, temperature=temperature, seed=seed
        )[0]

    def generate_group(
        self,
        messages: list[dict[str, Any]],
        n: int,
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 1.0,
        seed: int | None = None,
    ) -> list[ChatResponse]:
        """`n` replies to one conversation in a single request (`n` choices)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "n": n,
        }
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
        if self.token_ids:
            body.update(logprobs=True, return_tokens_as_token_ids=True, return_token_ids=True)
        url = f"{self.base_url}/chat/completions"
        response = self._client.post(url, json=body)
        if response.status_code != 200:
            raise OpenAIServerError(f"POST {url} returned {response.status_code}: {response.text[:500]}")
        payload = response.json()
        choices = payload.get("choices")
        if not isinstance(choices, list) or not choices:
            raise OpenAIServerError(f"POST {url} returned no `choices`: {str(payload)[:500]}")
        prompt_ids = payload.get("prompt_token_ids")
        usage = {k: int(v) for k, v in (payload.get("usage") or {}).items() if isinstance(v, int)}
        return [_choice_response(choice, prompt_ids, usage, url) for choice in choices]


def _choice_response(
    choice: dict[str, Any], prompt_ids: list[int] | None, usage: dict[str, int], url: str
) -> ChatResponse:
    message = choice.get("message")
    if not isinstance(message, dict):
        raise OpenAIServerError(f"POST {url}: a choice has no `message` object")
    text = message.get("content") or ""
    if message.get("tool_calls"):
        calls = hermes_tool_call_text(message["tool_calls"])
        text = f"{text}\n{calls}" if text else calls
    ids, logprobs = _token_ids_and_logprobs(choice)
    return ChatResponse(
        text=text,
        prompt_token_ids=list(prompt_ids) if prompt_ids is not None else None,
        completion_token_ids=ids,
        completion_logprobs=logprobs,
        usage=dict(usage),
    )


def _token_ids_and_logprobs(choice: dict[str, Any]) -> tuple[list[int] | None, list[float] | None]:
    """Sampled ids and logprobs from vLLM's fields: `token_ids`, and `logprobs.content[i]` whose
    `token` reads `token:<id>` under `return_tokens_as_token_ids`."""
    entries = (choice.get("logprobs") or {}).get("content") or []
    logprobs = [float(e["logprob"]) for e in entries] if entries else None
    ids = choice.get("token_ids")
    if ids is None and entries and all(str(e.get("token", "")).startswith("token:") for e in entries):
        ids = [int(str(e["token"]).removeprefix("token:")) for e in entries]
    return (list(ids) if ids is not None else None), logprobs
