"""The seed tree and content addresses: every item's seed derives from (master seed, stage, parent id, index)."""

from __future__ import annotations

import hashlib
import json
import random
from typing import Any


def canonical_json(obj: Any) -> str:
    """Sorted keys, no whitespace, unicode kept: equal data always gives equal bytes."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_id(obj: Any, length: int = 16) -> str:
    """sha256 of the canonical JSON of `obj`, truncated to `length` hex digits."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()[:length]


def item_seed(master: int, stage: str, parent_id: str, index: int) -> int:
    """A 63-bit seed for one item; adding items elsewhere never shifts it."""
    digest = hashlib.sha256(f"{master}|{stage}|{parent_id}|{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def item_rng(master: int, stage: str, parent_id: str, index: int = 0) -> random.Random:
    """A private RNG for one item of one stage."""
    return random.Random(item_seed(master, stage, parent_id, index))
