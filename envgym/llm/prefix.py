"""Reuse of a prompt's key/value cache by the next prompt that starts the same way.

An agent's prompts in one environment share a long head (the policy and the tool schemas, often 2,000 tokens) and
each turn extends the last one, so on CPU most of a turn's time is spent recomputing attention keys and values
already computed for the previous prompt. `PrefixCache` keeps the cache of the last prompt, one per model, and
hands the next prompt a copy cropped to the tokens both share; `generate` then runs only the rest. The logits
match a full recomputation to float tolerance, not bit for bit, so it is opt-in (`reuse_prefix`), off wherever
exact logprobs matter (the trainer recomputes them).
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

MIN_SHARED = 32  # below this many shared tokens, copying a cache costs about what it saves


class PrefixCache:
    """The key/value cache of the last prompt a model ran, and the ids it covers."""

    def __init__(self) -> None:
        self.ids: list[int] = []
        self.cache: Any = None
        self.reused_tokens = 0

    def lookup(self, prompt: list[int]) -> Any:
        """A copy of the cache cropped to the head `prompt` shares with the last prompt (at least one token of
        `prompt` is left to run), or None when they share too little."""
        shared = 0
        for a, b in zip(self.ids, prompt, strict=False):
            if a != b:
                break
            shared += 1
        shared = min(shared, len(prompt) - 1)
        if self.cache is None or shared < MIN_SHARED:
            return None
        cache = copy.deepcopy(self.cache)
        _crop_to(cache, shared)
        self.reused_tokens += shared
        return cache

    def store(self, prompt: list[int], cache: Any) -> None:
        """Keep `cache` (which may run past the prompt, into the reply) for the prompt's tokens only."""
        _crop_to(cache, len(prompt))
        self.ids, self.cache = list(prompt), cache


def _crop_to(cache: Any, length: int) -> None:
    """Keep the first `length` positions (transformers 5 crops by a negative count of positions to drop)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


_CACHES: weakref.WeakKeyDictionary[Any, PrefixCache] = weakref.WeakKeyDictionary()


def prefix_cache(model: Any) -> PrefixCache:
    """The one prefix cache of `model`, shared by every sampler over it (a policy is built per episode)."""
    if model not in _CACHES:
        _CACHES[model] = PrefixCache()
    return _CACHES[model]
