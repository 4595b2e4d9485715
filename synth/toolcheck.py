"""Tool validation by execution on fixtures (EnvScaler-style): each tool is called on the seeded world.

Checks per tool: its JSON Schema is well formed, its name is unique, a valid call succeeds, a read leaves the
state hash unchanged, a write changes only the entity it declares, and its declared errors fire (an unknown id
gives not_found, a violated precondition gives its error and no change, missing arguments are rejected).
"""

from __future__ import annotations

from typing import Any

from envgym.world.spec import Effect, ToolSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor, compare
from envgym.world.validate import SchemaError, compile_validator

MISSING_ID = "ZZ-NO-SUCH-ID-999"


def _value(schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        return schema["enum"][-1]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        lo = schema.get("minimum", 0)
        hi = schema.get("maximum", lo + 10)
        mid = (lo + hi) / 2
        return int(mid) if kind == "integer" else round(mid, 1)
    if kind == "boolean":
        return True
    return "x"


def _holds(effect: Effect, record: dict[str, Any]) -> bool:
    return all(compare(record.get(p.field), p.op, p.value) for p in effect.preconditions)


def _target_key(world: WorldSpec, state: WorldState, effect: Effect, want_ok: bool) -> str | None:
    table = state.table(effect.entity)
    return next((k for k in sorted(table) if _holds(effect, table[k]) == want_ok), None)


def valid_arguments(world: WorldSpec, state: WorldState, tool: ToolSpec) -> dict[str, Any] | None:
    """Arguments for a call that should succeed on `state`, built from its records; None if none exist."""
    effect = tool.effect
    if effect is None:
        return None
    props: dict[str, Any] = tool.parameters.get("properties", {})
    args = {name: _value(schema) for name, schema in props.items() if name in tool.parameters.get("required", [])}
    keys = {e.key: name for name, e in world.entities.items()}
    for name in args:
        if name == effect.key_arg:
            key = _target_key(world, state, effect, want_ok=True)
            if key is None:
                return None
            args[name] = key
        elif name in keys:
            args[name] = sorted(state.table(keys[name]))[0]
    if "email" in args:
        args["email"] = state.table(effect.entity)[sorted(state.table(effect.entity))[0]]["email"]
    if effect.query_arg in args:
        first = state.table(effect.entity)[sorted(state.table(effect.entity))[0]]
        args[effect.query_arg] = str(first.get((effect.search_fields or ["name"])[0]))
    return args


def _violating_state(world: WorldSpec, state: WorldState, effect: Effect) -> tuple[WorldState, str] | None:
    """A fixture with a record that breaks the first precondition (taken from the data, else made by editing)."""
    key = _target_key(world, state, effect, want_ok=False)
    if key is not None:
        return state, key
    fixture = state.copy()
    table = fixture.table(effect.entity)
    key = sorted(table)[0]
    pre = effect.preconditions[0]
    choices = world.entities[effect.entity].fields[pre.field].choices or []
    if pre.op == "ne":
        table[key][pre.field] = pre.value
    elif pre.op == "in":
        bad = [c for c in choices if c not in pre.value]
        if not bad:
            return None
        table[key][pre.field] = bad[0]
    else:
        return None
    return fixture, key


def check_tool(world: WorldSpec, state: WorldState, executor: ToolExecutor, tool: ToolSpec) -> dict[str, bool]:
    """Run every check that applies to `tool`; name -> passed."""
    checks: dict[str, bool] = {}
    try:
        compile_validator(tool.parameters)
        checks["schema_well_formed"] = True
    except SchemaError:
        checks["schema_well_formed"] = False
        return checks
    checks["name_unique"] = sum(t.name == tool.name for t in world.tools) == 1
    effect = tool.effect
    args = valid_arguments(world, state, tool)
    checks["valid_call_succeeds"] = False
    if effect is None or args is None:
        return checks
    fixture = state.copy()
    result = executor.execute(fixture, tool.name, args)
    checks["valid_call_succeeds"] = result.ok
    changed = {c.entity for c in state.diff(fixture)}
    if tool.read_only:
        checks["read_keeps_state"] = fixture.hash() == state.hash()
    else:
        checks["write_scope"] = changed <= {effect.entity}
    if tool.parameters.get("required"):
        checks["missing_arguments_rejected"] = executor.execute(state.copy(), tool.name, {}).error_kind == \
            "invalid_arguments"
    if effect.op in ("get", "update", "delete"):
        bad = dict(args)
        if effect.key_arg:
            bad[effect.key_arg] = MISSING_ID
        else:
            bad = {k: (f"{MISSING_ID}@example.com" if k == "email" else MISSING_ID) for k in args}
        fixture = state.copy()
        missing = executor.execute(fixture, tool.name, bad)
        checks["not_found_fires"] = missing.error_kind == "not_found" and fixture.hash() == state.hash()
    if effect.preconditions and effect.key_arg:
        found = _violating_state(world, state, effect)
        if found is None:
            checks["precondition_fires"] = False
        else:
            fixture, key = found
            before = fixture.hash()
            outcome = executor.execute(fixture, tool.name, {**args, effect.key_arg: key})
            checks["precondition_fires"] = outcome.error_kind == "precondition" and fixture.hash() == before
    return checks


def validate_tools(world: WorldSpec, state: WorldState) -> dict[str, dict[str, bool]]:
    """tool name -> checks, for every tool of `world` on its seeded state."""
    executor = ToolExecutor(world)
    return {tool.name: check_tool(world, state, executor, tool) for tool in world.tools}
