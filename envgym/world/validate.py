"""Fast validation of tool arguments against their JSON Schema.

Tool calls are validated on every step, so schemas are compiled once into plain Python checks for the keywords
tool schemas use (type, properties, required, additionalProperties, enum, minimum/maximum, items, lengths). A
schema with other keywords falls back to the `jsonschema` library. Errors name the argument and what was expected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Check = Callable[[Any, str], str | None]

_SIMPLE_KEYWORDS = {
    "type",
    "properties",
    "required",
    "additionalProperties",
    "enum",
    "minimum",
    "maximum",
    "items",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "description",
    "title",
    "default",
    "examples",
    "format",
}
_TYPE_NAMES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class SchemaError(ValueError):
    """A tool's parameter schema is not a well-formed JSON Schema."""


def _is_type(value: Any, name: str) -> bool:
    if name in ("integer", "number") and isinstance(value, bool):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPE_NAMES.get(name, (object,)))


def _describe(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


def _simple(schema: dict[str, Any]) -> bool:
    if not set(schema) <= _SIMPLE_KEYWORDS:
        return False
    subs = list(schema.get("properties", {}).values())
    if isinstance(schema.get("items"), dict):
        subs.append(schema["items"])
    if isinstance(schema.get("additionalProperties"), dict):
        return False
    return all(isinstance(s, dict) and _simple(s) for s in subs)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_KEYWORD_OK: dict[str, Callable[[Any], bool]] = {
    "type": lambda v: v in _TYPE_NAMES or (isinstance(v, list) and bool(v) and all(t in _TYPE_NAMES for t in v)
                                           and len(set(v)) == len(v)),
    "properties": lambda v: isinstance(v, dict),
    "required": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v) and len(set(v)) == len(v),
    "additionalProperties": lambda v: isinstance(v, bool),
    "enum": lambda v: isinstance(v, list),
    "minimum": _number, "maximum": _number,
    "items": lambda v: isinstance(v, dict | bool),
    "minLength": _count, "maxLength": _count, "minItems": _count, "maxItems": _count,
    "description": lambda v: isinstance(v, str), "title": lambda v: isinstance(v, str),
    "format": lambda v: isinstance(v, str), "examples": lambda v: isinstance(v, list),
    "default": lambda v: True,
}


def _plainly_well_formed(schema: Any) -> bool:
    """A conservative well-formedness check for simple schemas: True only when the metaschema surely accepts it
    (each keyword's value has the type the metaschema requires), so the slow metaschema check can be skipped."""
    if not isinstance(schema, dict) or not set(schema) <= _SIMPLE_KEYWORDS:
        return False
    if not all(_KEYWORD_OK[k](v) for k, v in schema.items()):
        return False
    subs = list(schema.get("properties", {}).values())
    if isinstance(schema.get("items"), dict):
        subs.append(schema["items"])
    return all(_plainly_well_formed(s) for s in subs)


def _compile(schema: dict[str, Any]) -> Check:
    checks: list[Check] = []
    object_check: Check | None = None
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        exact = {"string": str, "boolean": bool, "array": list, "object": dict}.get(names[0])

        def check_type(value: Any, where: str) -> str | None:
            if (exact is not None and type(value) is exact) or any(_is_type(value, n) for n in names):
                return None
            return f"{where} must be {' or '.join(names)}, got {_describe(value)} {value!r}"

        checks.append(check_type)
    if "enum" in schema:
        allowed = schema["enum"]
        checks.append(lambda v, w: None if v in allowed else f"{w} must be one of {allowed}, got {v!r}")
    if "minimum" in schema:
        lo = schema["minimum"]
        checks.append(lambda v, w: f"{w} must be >= {lo}, got {v}" if _num(v) and v < lo else None)
    if "maximum" in schema:
        hi = schema["maximum"]
        checks.append(lambda v, w: f"{w} must be <= {hi}, got {v}" if _num(v) and v > hi else None)
    for key, sized, is_min in (
        ("minLength", str, True),
        ("maxLength", str, False),
        ("minItems", list, True),
        ("maxItems", list, False),
    ):
        if key in schema:
            checks.append(_length_check(key, sized, int(schema[key]), is_min))
    if "properties" in schema or "required" in schema or "additionalProperties" in schema:
        props = {k: _compile(v) for k, v in schema.get("properties", {}).items()}
        required = list(schema.get("required", []))
        closed = schema.get("additionalProperties", True) is False

        top_labels = {name: f"argument '{name}'" for name in props}  # the labels at the top level, made once

        def check_object(value: Any, where: str) -> str | None:
            if not isinstance(value, dict):
                return None
            top = where == "arguments"
            prefix = "" if top else f"{_path(where)}."
            for name in required:
                if name not in value:
                    return f"missing required argument '{prefix}{name}'"
            for name, item in value.items():
                sub = props.get(name)
                if sub is None:
                    if closed:
                        return f"unexpected argument '{prefix}{name}'; allowed: {sorted(props)}"
                    continue
                err = sub(item, top_labels[name] if top else f"argument '{prefix}{name}'")
                if err:
                    return err
            return None

        checks.append(check_object)
        object_check = check_object
    if isinstance(schema.get("items"), dict):
        item_check = _compile(schema["items"])

        def check_items(value: Any, where: str) -> str | None:
            if not isinstance(value, list):
                return None
            base = "arguments" if where == "arguments" else f"argument '{_path(where)}"
            for i, item in enumerate(value):
                err = item_check(item, f"{base}[{i}]'" if where != "arguments" else f"{base}[{i}]")
                if err:
                    return err
            return None

        checks.append(check_items)

    if len(checks) == 1:
        return checks[0]
    if types == "object" and len(checks) == 2 and object_check is not None:
        # The usual schema of a tool's arguments, checked on every call: one function instead of a loop over two.
        check_kind, check_fields = checks

        def check_typed_object(value: Any, where: str) -> str | None:
            if type(value) is dict:
                return check_fields(value, where)
            return check_kind(value, where) or check_fields(value, where)

        return check_typed_object

    def check_all(value: Any, where: str) -> str | None:
        for check in checks:
            err = check(value, where)
            if err:
                return err
        return None

    return check_all


def _path(where: str) -> str:
    """The argument path inside a label: "argument 'a.b'" -> "a.b" (labels quote the whole path once)."""
    return where[len("argument '") : -1] if where.startswith("argument '") and where.endswith("'") else where


def _length_check(key: str, sized: type, bound: int, is_min: bool) -> Check:
    def check(value: Any, where: str) -> str | None:
        if isinstance(value, sized) and (len(value) < bound if is_min else len(value) > bound):  # type: ignore[arg-type]
            return f"{where} violates {key}={bound} (length {len(value)})"  # type: ignore[arg-type]
        return None

    return check


def _num(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "format"})  # keywords that check nothing
_EXACT_TYPES = {"string": str, "boolean": bool, "array": list, "object": dict}


def _flat_object(schema: dict[str, Any], check: Check) -> Callable[[Any], str | None] | None:
    """The usual arguments schema (an object of properties that each only name one type) as one function that
    accepts what `check` accepts without calling it; anything it does not accept at a glance goes to `check`, for
    the same error. None for a schema of another shape."""
    if schema.get("type") != "object" or not set(schema) <= {"properties", "required", "additionalProperties",
                                                               "type", *_ANNOTATIONS}:
        return None
    exact: dict[str, type] = {}
    for name, sub in schema.get("properties", {}).items():
        kind = _EXACT_TYPES.get(sub.get("type")) if isinstance(sub.get("type"), str) else None
        if kind is None or not set(sub) <= {"type", *_ANNOTATIONS}:
            return None
        exact[name] = kind
    required = list(schema.get("required", []))
    closed = schema.get("additionalProperties", True) is False

    def validate(args: Any) -> str | None:
        if type(args) is not dict:
            return check(args, "arguments")
        for name in required:
            if name not in args:
                return check(args, "arguments")
        for name, value in args.items():
            kind = exact.get(name)
            if (type(value) is not kind) if kind is not None else closed:
                return check(args, "arguments")
        return None

    return validate


def compile_validator(schema: dict[str, Any]) -> Callable[[Any], str | None]:
    """Compile a JSON Schema into `validate(args) -> error message | None`. Raises SchemaError if malformed."""
    simple = _simple(schema)
    if simple and _plainly_well_formed(schema):
        # The metaschema check costs ~20 ms a schema, skipped where a plain look proves the schema well formed;
        # the jsonschema library is then not imported at all (its ~5k objects would stay on the heap that every
        # full collection of the cycle collector walks).
        check = _compile(schema)
        return _flat_object(schema, check) or (lambda args: check(args, "arguments"))
    import jsonschema

    try:
        jsonschema.Draft202012Validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        raise SchemaError(
            f"invalid JSON Schema at {'/'.join(map(str, exc.path)) or '<root>'}: {exc.message}"
        ) from exc
    if simple:
        check = _compile(schema)
        return _flat_object(schema, check) or (lambda args: check(args, "arguments"))
    validator = jsonschema.Draft202012Validator(schema)

    def validate(args: Any) -> str | None:
        error = jsonschema.exceptions.best_match(validator.iter_errors(args))
        if error is None:
            return None
        where = "/".join(map(str, error.absolute_path))
        return f"argument '{where}': {error.message}" if where else error.message

    return validate
