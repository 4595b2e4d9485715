"""Checking mechanisms by random calls: a small base world, argument draws that follow each tool's `Arg`s, and a
run that checks every invariant after every call (the catalogue's test, and synth's check of composed worlds)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from envgym.world.mechanisms import bound, install, tool_defs
from envgym.world.mechanisms.base import Arg, Bound
from envgym.world.spec import EntitySpec, FieldSpec, ToolSpec, WorldSpec
from envgym.world.state import WorldState, generate_state
from envgym.world.tools import ToolExecutor

WORDS = ["Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Garnet", "Harbor"]


def base_entities() -> dict[str, EntitySpec]:
    """Parties, items and records (each naming a party and an item): the roles every mechanism binds to."""
    return {
        "parties": EntitySpec(key="party_id", prefix="P", count=6, fields={
            "party_id": FieldSpec(), "full_name": FieldSpec(faker="name"), "email": FieldSpec(faker="email")}),
        "items": EntitySpec(key="item_id", prefix="I", count=6, fields={
            "item_id": FieldSpec(), "name": FieldSpec(choices=WORDS, unique=True),
            "status": FieldSpec(choices=["active", "blocked"])}),
        "records": EntitySpec(key="record_id", prefix="R", count=12, fields={
            "record_id": FieldSpec(), "party_id": FieldSpec(ref="parties"), "item_id": FieldSpec(ref="items"),
            "quantity": FieldSpec(type="integer", min=1, max=3),
            "status": FieldSpec(choices=["open", "confirmed", "cancelled"])}),
    }


def mechanism_world(name: str, seed: int = 0) -> WorldSpec:
    """A world of the base entities with one mechanism and nothing else."""
    made = install(name, "m", base_entities())
    return WorldSpec(name=f"mech_{name}", seed=seed, entities=made.entities, tools=made.tools, mechanisms=[made.use])


def _draw(b: Bound, arg: Arg, state: WorldState, rng: random.Random) -> Any:
    if arg.kind == "key":
        keys = sorted(state.table(b.ent(arg.role)))
        return rng.choice(keys) if keys and rng.random() < 0.92 else "NOPE-1"
    if arg.kind == "int":
        return rng.randint(int(arg.lo), int(arg.hi))
    if arg.kind == "number":
        return round(rng.uniform(arg.lo, arg.hi), 2)
    if arg.kind == "enum":
        return rng.choice(list(arg.choices or b.p(arg.choices_param)))
    if arg.kind == "date":
        return f"2025-{rng.randint(6, 8):02d}-{rng.choice([1, 2, 3, 7, 8, 9, 20]):02d}"
    if arg.kind == "time":
        return f"{rng.randint(6, 20):02d}:{rng.choice(['00', '15', '30', '45'])}"
    if arg.kind == "bool":
        return rng.random() < 0.5
    if arg.kind == "lines":
        keys = sorted(state.table(b.ent(arg.role)))
        return [{b.key(arg.role): rng.choice(keys), "quantity": rng.randint(1, 9)}
                for _ in range(rng.randint(1, int(arg.hi)))]
    if arg.kind == "address":
        return {"street": f"{rng.randint(1, 90)} Main St", "city": rng.choice(["Springfield", "Farpoint", "Lakeside"]),
                "postcode": f"{rng.randint(10000, 99999)}"}
    return rng.choice(["alpha", "beta", "k-" + str(rng.randint(1, 4))])


def random_args(world: WorldSpec, tool: ToolSpec, state: WorldState, rng: random.Random) -> dict[str, Any]:
    """Arguments for a mechanism tool, drawn to fit its schema (ids mostly of existing records)."""
    assert tool.mechanism is not None
    b = bound(world, next(u for u in world.mechanisms if u.id == tool.mechanism.use))
    td = next(t for t in tool_defs(b) if t.verb == tool.mechanism.role)
    return {b.arg_name(n): _draw(b, a, state, rng) for n, a in td.args.items() if not a.optional or rng.random() < .5}


def random_call(world: WorldSpec, state: WorldState, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A call of one of the world's mechanism tools with arguments drawn to fit its schema."""
    tool = rng.choice([t for t in world.tools if t.mechanism is not None])
    return tool.name, random_args(world, tool, state, rng)


@dataclass
class FuzzReport:
    """What a run of random calls did: calls that went through and were refused per tool, and the first broken
    invariant (with the call after which it broke)."""

    ok: dict[str, int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)
    crashed: list[str] = field(default_factory=list)
    violation: str | None = None


def fuzz(world: WorldSpec, calls: int = 200, seed: int = 0, check_every: int = 1, check_reads: bool = True) -> \
        FuzzReport:
    """Run `calls` random calls on a fresh state of `world`, checking every invariant before the first call, after
    every `check_every`-th one and after the last; with `check_reads`, read-only tools must leave the state as it
    was (hashed around each read)."""
    from envgym.world.mechanisms import violations

    state = generate_state(world)
    executor = ToolExecutor(world)
    report = FuzzReport()
    broken = violations(world, state)
    if broken:
        report.violation = f"seeded state: {broken[0]}"
        return report
    rng = random.Random(seed)
    for n in range(1, calls + 1):
        name, args = random_call(world, state, rng)
        before = state.hash() if check_reads and executor.tools[name].read_only else None
        result = executor.execute(state, name, args)
        side = report.ok if result.ok else report.refused
        side[name] = side.get(name, 0) + 1
        if result.error_kind == "tool_crashed":
            report.crashed.append(f"{name}({args}): {result.error}")
        if before is not None and state.hash() != before:
            report.violation = f"read-only {name}({args}) changed the state"
            return report
        if n % check_every and n != calls:
            continue
        broken = violations(world, state)
        if broken:
            report.violation = f"after {name}({args}): {broken[0]}"
            return report
    return report
