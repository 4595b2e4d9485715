"""Stage 3b, tool checks: every synthesized tool is executed on its seeded world before it is kept.

A witness record of the tool's entity supplies valid arguments. Checks: the schema compiles, the name is unique, a
valid call succeeds, a read leaves the state unchanged, a write changes its own entity and nothing else, missing
arguments are rejected, an unknown id gives not_found, each precondition (state machine, permission) fires on a
record that violates it, leaving the state unchanged, and each failure mode the env plays (rate limit, transient)
fires on repeated valid calls, changes nothing, and lets the retry through.
"""

from __future__ import annotations

import random
from typing import Any

from envgym.world.mechanisms.check import fuzz, random_args
from envgym.world.spec import Effect, ToolSpec, WorldSpec
from envgym.world.state import Record, WorldState
from envgym.world.tools import RETRYABLE, FaultLedger, ToolErrorKind, ToolExecutor, _arg, compare
from envgym.world.validate import SchemaError, compile_validator
from synth.model import DomainModel
from synth.stages.agreement import agreement_checks

MISSING_ID = "ZZ-NO-SUCH-ID-999"
FAULT_TRIALS = 400  # at most this many valid calls to see each failure mode fire (a 0.2 share misses: < 1e-12)


def _holds(effect: Effect, record: Record, args: dict[str, Any]) -> bool:
    return all(compare(record.get(p.field), p.op, _arg(p.value, args)) for p in effect.preconditions)


def _fill(schema: dict[str, Any], name: str, witness: Record, key: str, effect: Effect) -> Any:
    if schema.get("type") == "object":
        return {k: _fill(v, k, witness, key, effect) for k, v in schema.get("properties", {}).items()
                if k in schema.get("required", [])}
    value = witness.get(name)
    if name == effect.key_arg:
        value = witness[key]
    if "enum" in schema and value not in schema["enum"]:
        value = schema["enum"][0]
    if schema.get("type") in ("integer", "number"):
        lo, hi = schema.get("minimum", 0), schema.get("maximum", 10)
        value = value if isinstance(value, int | float) and lo <= value <= hi else (int(lo) if
                                                                                    schema["type"] == "integer" else lo)
    if value is None:
        value = "x"
    return value


def _changed(value: Any, schema: dict[str, Any]) -> Any:
    """Another valid value, so that a witness update really changes its record."""
    if "enum" in schema:
        return next((c for c in schema["enum"] if c != value), value)
    if schema.get("type") in ("integer", "number"):
        lo, hi = schema.get("minimum", 0), schema.get("maximum", 10)
        return lo if value != lo else hi
    return f"{value}-changed"


def witness_arguments(world: WorldSpec, state: WorldState, tool: ToolSpec, ok: bool = True) -> tuple[
        dict[str, Any], Record] | None:
    """Required arguments taken from a record of the tool's entity on which the call should (not) pass its
    preconditions; None when no record fits."""
    effect = tool.effect
    if effect is None:
        return None
    key = world.entities[effect.entity].key
    props = tool.parameters.get("properties", {})
    for rkey in sorted(state.table(effect.entity)):
        record = state.table(effect.entity)[rkey]
        args = {n: _fill(s, n, record, key, effect) for n, s in props.items()
                if n in tool.parameters.get("required", [])}
        if effect.op == "update":
            args = {n: _changed(v, props[n]) if effect.set.get(n.split(".")[0]) == f"${n}" else v
                    for n, v in args.items()}
        if _holds(effect, record, args) == ok:
            return args, record
    return None


def check_tool(world: WorldSpec, state: WorldState, executor: ToolExecutor, tool: ToolSpec) -> dict[str, bool]:
    """Run every check that applies to `tool`; check name -> passed."""
    checks: dict[str, bool] = {}
    try:
        compile_validator(tool.parameters)
        checks["schema_well_formed"] = True
    except SchemaError:
        checks["schema_well_formed"] = False
        return checks
    checks["name_unique"] = sum(t.name == tool.name for t in world.tools) == 1
    if tool.mechanism is not None:
        return {**checks, **check_mechanism_tool(world, state, ToolExecutor(world), tool)[0]}
    effect = tool.effect
    found = witness_arguments(world, state, tool)
    checks["valid_call_succeeds"] = False
    if effect is None or found is None:
        return checks
    args, _ = found
    before = state.hash()
    # Reads run on the state itself (restored if one wrongly wrote); writes run on a copy.
    fixture = state if tool.read_only else state.copy()
    result = executor.execute(fixture, tool.name, args)
    checks["valid_call_succeeds"] = result.ok
    if tool.read_only:
        checks["read_keeps_state"] = state.hash() == before
        if not checks["read_keeps_state"]:
            raise ToolBrokeState(tool.name)
    elif effect.op != "update_many":
        checks["write_scope"] = {c.entity for c in state.diff(fixture)} == {effect.entity}
    if tool.parameters.get("required"):
        checks["missing_arguments_rejected"] = executor.execute(state, tool.name, {}).error_kind == \
            "invalid_arguments"
    if effect.key_arg:
        missing = executor.execute(state, tool.name, {**args, effect.key_arg: MISSING_ID})
        checks["not_found_fires"] = missing.error_kind == "not_found" and state.hash() == before
    if effect.preconditions and effect.key_arg:
        bad = witness_arguments(world, state, tool, ok=False)
        if bad is not None:
            outcome = executor.execute(state, tool.name, bad[0])
            checks["precondition_fires"] = outcome.error_kind == "precondition" and state.hash() == before
    if tool.faults is not None:
        checks["faults_fire"] = faults_fire(executor, state, tool, args)
    if state.hash() != before:
        raise ToolBrokeState(tool.name)
    return checks


def faults_fire(executor: ToolExecutor, state: WorldState, tool: ToolSpec, args: dict[str, Any]) -> bool:
    """Valid calls, each on a fresh copy of `state`, through one episode's ledger: every declared failure mode
    fires, a failed call changes nothing, and the call after it goes through."""
    assert tool.faults is not None
    wanted = {ToolErrorKind.RATE_LIMITED} if tool.faults.rate_limit is not None else set()
    wanted |= {ToolErrorKind.TRANSIENT} if tool.faults.transient else set()
    ledger, rng, seen, failed = FaultLedger(), random.Random(tool.name), set(), False
    for _ in range(FAULT_TRIALS):
        fixture = state.copy()
        result = executor.execute(fixture, tool.name, args, rng, 0.0, ledger)
        if result.error_kind in RETRYABLE:
            if failed or fixture.diff(state):
                return False
            seen.add(result.error_kind)
        elif not result.ok:
            return False
        failed = not result.ok
        if seen == wanted and not failed:
            return True
    return False


class ToolBrokeState(Exception):
    """A check changed the shared fixture (a read that writes, or a failed call that wrote anyway)."""


MECHANISM_TRIES = 60  # random argument draws to find a call of a mechanism tool that goes through
COMPOSED_CALLS = 120  # random calls over all of a world's mechanism tools, invariants checked after each


def check_mechanism_tool(world: WorldSpec, state: WorldState, executor: ToolExecutor, tool: ToolSpec) -> tuple[
        dict[str, bool], tuple[dict[str, Any], WorldState] | None]:
    """Checks of a mechanism tool, and the arguments of a call that went through with the state it went through
    on (None if none did): a valid call
    succeeds, a read keeps the state, a write changes only the tables it declares, missing arguments and an
    unknown id are refused and change nothing."""
    checks = {"name_unique": sum(t.name == tool.name for t in world.tools) == 1, "valid_call_succeeds": False}
    before = state.hash()
    rng = random.Random(tool.name)
    found: dict[str, Any] | None = None
    # Calls of the mechanism's other tools build up what this one needs (a signup to withdraw, a hold to confirm)
    # on a scratch state; the tool itself is tried on a copy of that state each time.
    assert tool.mechanism is not None
    siblings = [t for t in world.tools if t.mechanism is not None and t.mechanism.use == tool.mechanism.use]
    scratch = state.copy()
    for _ in range(MECHANISM_TRIES):
        args = random_args(world, tool, scratch, rng)
        fixture = scratch.copy()
        if executor.execute(fixture, tool.name, args).ok:
            found, pre = args, scratch
            checks["valid_call_succeeds"] = True
            if tool.read_only:
                checks["read_keeps_state"] = fixture.hash() == scratch.hash()
            else:
                checks["write_scope"] = {c.entity for c in scratch.diff(fixture)} <= set(tool.writes or [])
            break
        other = rng.choice(siblings)
        executor.execute(scratch, other.name, random_args(world, other, scratch, rng))
    if tool.parameters.get("required"):
        checks["missing_arguments_rejected"] = executor.execute(state, tool.name, {}).error_kind == \
            "invalid_arguments"
    ids = [n for n in tool.parameters.get("required", []) if n.endswith("_id")]
    if found is not None and ids:
        trial = pre.copy()
        missing = executor.execute(trial, tool.name, {**found, ids[0]: MISSING_ID})
        checks["not_found_fires"] = missing.error_kind == "not_found" and trial.hash() == pre.hash()
    if state.hash() != before:
        raise ToolBrokeState(tool.name)
    return checks, (found, pre) if found is not None else None


def validate_tools(world: WorldSpec, state: WorldState, domain: DomainModel | None = None,
                   made: dict[str, tuple[str, str]] | None = None) -> dict[str, dict[str, bool]]:
    """tool name -> checks, for every tool of `world` on its seeded state. A tool that corrupts the shared
    fixture fails (`fixture_kept`) and the fixture is rebuilt from a pristine copy. With the `domain` and each
    tool's (entity, operator) in `made`, every valid call also runs the agreement checks (synth.stages.agreement),
    and the world's mechanisms are run together: a broken invariant fails every mechanism tool
    (`composed_invariants`)."""
    executor = ToolExecutor(world)
    pristine = state.copy()
    out: dict[str, dict[str, bool]] = {}
    for tool in world.tools:
        try:
            if tool.mechanism is not None:
                out[tool.name], call = check_mechanism_tool(world, state, executor, tool)
            else:
                out[tool.name] = check_tool(world, state, executor, tool)
                found = witness_arguments(world, state, tool)
                call = (found[0], state) if found is not None else None
        except ToolBrokeState:
            out[tool.name] = {"fixture_kept": False}
            state = pristine.copy()
            continue
        if domain is not None and made is not None and call is not None and tool.name in made:
            entity, operator = made[tool.name]
            out[tool.name].update(agreement_checks(world, domain, executor, call[1], tool, call[0], entity,
                                                   operator))
    if world.mechanisms:
        # Invariants every 20 calls: a broken one stays broken (each mechanism's own test checks every call).
        composed = fuzz(world, COMPOSED_CALLS, seed=len(world.tools), check_every=20,
                        check_reads=False).violation is None
        for tool in world.tools:
            if tool.mechanism is not None:
                out[tool.name]["composed_invariants"] = composed
    return out
