"""The one-function validator of the usual arguments schema (`validate._flat_object`) says what the general
compiled check says, on any arguments."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from envgym.world.validate import _compile, _flat_object, compile_validator

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
    max_leaves=4,
)
names = st.sampled_from(["a", "b", "c", "order_id"])
kinds = st.sampled_from(["string", "boolean", "array", "object"])


@st.composite
def flat_schemas(draw: st.DrawFn) -> dict[str, Any]:
    props = draw(st.dictionaries(names, kinds.map(lambda k: {"type": k, "description": "x"}), max_size=3))
    schema: dict[str, Any] = {"type": "object", "properties": props}
    schema["required"] = draw(st.lists(st.sampled_from(sorted(props) or ["a"]), unique=True, max_size=2))
    if draw(st.booleans()):
        schema["additionalProperties"] = draw(st.booleans())
    return schema


@settings(max_examples=400, deadline=None)
@given(flat_schemas(), values | st.dictionaries(names, values, max_size=3))
def test_the_flat_validator_gives_what_the_general_check_gives(schema: dict[str, Any], args: Any) -> None:
    assert _flat_object(schema, _compile(schema)) is not None
    assert compile_validator(schema)(args) == _compile(schema)(args, "arguments")


def test_schemas_with_more_than_types_keep_the_general_check() -> None:
    for schema in [
        {"type": "object", "properties": {"q": {"type": "string", "minLength": 1}}},
        {"type": "object", "properties": {"n": {"type": "integer"}}},
        {"type": "object", "properties": {"c": {"type": "string", "enum": ["a", "b"]}}},
        {"type": "object", "properties": {"p": {"type": ["string", "null"]}}},
        {"properties": {"a": {"type": "string"}}},
    ]:
        assert _flat_object(schema, _compile(schema)) is None, schema


def test_the_flat_validator_names_the_problem_as_the_general_check_does() -> None:
    validate = compile_validator({"type": "object", "properties": {"order_id": {"type": "string"}},
                                  "required": ["order_id"], "additionalProperties": False})
    assert validate({"order_id": "#W1"}) is None
    assert validate({}) == "missing required argument 'order_id'"
    assert validate({"order_id": 7}) == "argument 'order_id' must be string, got integer 7"
    assert validate({"order_id": "#W1", "x": 1}) == "unexpected argument 'x'; allowed: ['order_id']"
