"""Record/replay cache for chat models: a recorded run replays offline, byte for byte."""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Literal

from envgym.llm.base import ChatModel, ChatResponse

CacheMode = Literal["record", "replay", "auto"]


class CacheMissError(LookupError):
    """Replay mode met a request that was never recorded."""


def request_key(
    model_name: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    params: dict[str, Any],
) -> str:
    """sha256 of the canonical JSON of (model name, messages, tools, sampling params)."""
    canonical = json.dumps(
        {"model": model_name, "messages": messages, "tools": tools, "params": params},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CachedChatModel:
    """Wraps a `ChatModel`; responses live in a JSONL file, one `{"key", "response"}` object a line.

    Modes: `record` always calls the model and appends; `replay` never calls it and raises
    `CacheMissError` on a miss; `auto` replays hits and records misses. Appends take an exclusive file
    lock and write one line in one `write`, so concurrent processes never interleave lines. When a key
    was recorded twice, the last line wins.
    """

    def __init__(self, model: ChatModel, path: str | Path, mode: CacheMode = "auto") -> None:
        if mode not in ("record", "replay", "auto"):
            raise ValueError(f"CachedChatModel mode must be 'record', 'replay' or 'auto', not {mode!r}")
        self.model = model
        self.name = model.name
        self.path = Path(path)
        self.mode = mode
        self.hits = 0
        self.misses = 0
        self._entries: dict[str, ChatResponse] = self._load()

    def _load(self) -> dict[str, ChatResponse]:
        entries: dict[str, ChatResponse] = {}
        if not self.path.exists():
            return entries
        with self.path.open(encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    entries[record["key"]] = ChatResponse(**record["response"])
                except (json.JSONDecodeError, KeyError, TypeError) as error:
                    raise ValueError(f"{self.path}:{number}: not a cache record ({error})") from error
        return entries

    def _append(self, key: str, response: ChatResponse) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"key": key, "response": dataclasses.asdict(response)}, ensure_ascii=False) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        max_tokens: int = 256,
        temperature: float = 0.0,
        seed: int | None = None,
    ) -> ChatResponse:
        """The recorded response for this exact request, or the wrapped model's (recorded now)."""
        params = {"max_tokens": max_tokens, "temperature": temperature, "seed": seed}
        key = request_key(self.name, messages, tools, params)
        if self.mode != "record" and key in self._entries:
            self.hits += 1
            return dataclasses.replace(self._entries[key])
        if self.mode == "replay":
            raise CacheMissError(
                f"no recorded response in {self.path} for model {self.name!r} (key {key[:16]}…); "
                "record it first with mode='record' or 'auto'"
            )
        self.misses += 1
        response = self.model.chat(messages, tools, max_tokens=max_tokens, temperature=temperature, seed=seed)
        self._entries[key] = response
        self._append(key, response)
        return response
