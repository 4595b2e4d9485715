"""Tool execution: validation errors that name the problem, effects, preconditions, injected failures."""

from __future__ import annotations

import random

import pytest

from envgym.world.spec import WorldSpec
from envgym.world.state import generate_state
from envgym.world.tools import ToolExecutor
from envgym.world.validate import SchemaError, compile_validator


@pytest.fixture
def executor(shop_world: WorldSpec) -> ToolExecutor:
    return ToolExecutor(shop_world)


@pytest.mark.parametrize(
    ("name", "args", "kind", "needle"),
    [
        ("nope", {}, "unknown_tool", "unknown tool 'nope'"),
        ("get_item", {}, "invalid_arguments", "missing required argument 'item_id'"),
        ("get_item", {"item_id": "I0000", "x": 1}, "invalid_arguments", "unexpected argument 'x'"),
        ("get_item", {"item_id": 7}, "invalid_arguments", "argument 'item_id' must be string, got integer"),
        ("set_qty", {"item_id": "I0000", "qty": 500}, "invalid_arguments", "must be <= 99"),
        ("set_qty", {"item_id": "I0000", "qty": True}, "invalid_arguments", "must be integer, got boolean"),
        ("get_item", ["I0000"], "invalid_arguments", "must be a JSON object"),
        ("get_item", {"item_id": "I9999"}, "not_found", "no items with item_id='I9999'"),
    ],
)
def test_bad_calls_are_error_results(executor: ToolExecutor, shop_world: WorldSpec, name: str, args: object,
                                     kind: str, needle: str) -> None:
    state = generate_state(shop_world)
    result = executor.execute(state, name, args)
    assert not result.ok
    assert result.error_kind == kind
    assert needle in (result.error or "")


def test_read_leaves_state_unchanged(executor: ToolExecutor, shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    before = state.hash()
    result = executor.execute(state, "get_item", {"item_id": "I0001"})
    assert result.ok and result.value["item_id"] == "I0001"
    assert state.hash() == before


def test_update_applies_and_precondition_fires(executor: ToolExecutor, shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    state.table("items")["I0002"]["status"] = "open"
    assert executor.execute(state, "close_item", {"item_id": "I0002"}).ok
    assert state.get("items", "I0002")["status"] == "closed"
    again = executor.execute(state, "close_item", {"item_id": "I0002"})
    assert again.error_kind == "precondition"
    assert again.error == "item I0002 is already closed"


def test_create_assigns_the_next_key(executor: ToolExecutor, shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    result = executor.execute(state, "add_item", {"name": "lamp"})
    assert result.value == {"name": "lamp", "status": "open", "qty": 1, "item_id": "I0005"}
    assert state.get("items", "I0005") is not None


def test_failure_injection_is_seeded_and_off_by_default(executor: ToolExecutor, shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    call = ("get_item", {"item_id": "I0000"})
    assert all(executor.execute(state, *call).ok for _ in range(50))

    def pattern(seed: int) -> list[bool]:
        rng = random.Random(seed)
        return [executor.execute(state, *call, rng=rng, failure_rate=0.5).ok for _ in range(40)]

    assert pattern(1) == pattern(1)
    assert 5 < pattern(1).count(False) < 35
    failed = next(r for r in (executor.execute(state, *call, random.Random(0), 1.0),))
    assert failed.error_kind == "transient"


def test_malformed_schema_is_rejected() -> None:
    with pytest.raises(SchemaError, match="type"):
        compile_validator({"type": "object", "properties": {"a": {"type": "strnig"}}})


def test_fallback_validator_handles_other_keywords() -> None:
    validate = compile_validator({"type": "object", "properties": {"a": {"type": "string", "pattern": "^x"}}})
    assert validate({"a": "xy"}) is None
    assert "does not match" in (validate({"a": "yy"}) or "")


def test_object_schemas_check_the_type_then_the_fields_at_every_level() -> None:
    validate = compile_validator({"type": "object", "properties": {
        "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"],
                    "additionalProperties": False}}})
    assert validate({"address": {"zip": "12345"}}) is None
    assert validate("x") == "arguments must be object, got string 'x'"
    assert validate({"address": [1]}) == "argument 'address' must be object, got array [1]"
    assert "missing required argument" in (validate({"address": {}}) or "")
    assert "must be string, got integer 5" in (validate({"address": {"zip": 5}}) or "")
    assert "unexpected argument" in (validate({"address": {"zip": "1", "x": 1}}) or "")


def test_nested_argument_errors_name_the_path_once() -> None:
    """A nested argument is named by its path ('address.zip'), not by its parent's label wrapped again."""
    validate = compile_validator({"type": "object", "properties": {
        "address": {"type": "object", "properties": {"zip": {"type": "string"}}, "required": ["zip"],
                    "additionalProperties": False},
        "stops": {"type": "array", "items": {"type": "object", "properties": {"zip": {"type": "string"}},
                                             "required": ["zip"]}}}})
    assert validate({"address": {}}) == "missing required argument 'address.zip'"
    assert validate({"address": {"zip": 5}}) == "argument 'address.zip' must be string, got integer 5"
    assert validate({"address": {"zip": "1", "x": 1}}) == "unexpected argument 'address.x'; allowed: ['zip']"
    assert validate({"stops": [{"zip": "1"}, {}]}) == "missing required argument 'stops[1].zip'"
    assert validate({"stops": [{"zip": 2}]}) == "argument 'stops[0].zip' must be string, got integer 2"
    assert validate({"stops": [1]}) == "argument 'stops[0]' must be object, got integer 1"
