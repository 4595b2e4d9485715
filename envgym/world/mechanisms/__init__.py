"""The catalogue of business mechanisms and how a world uses them (layer 1: importable without synth).

A world lists the mechanisms it uses (`WorldSpec.mechanisms`) and its tools name one of them
(`ToolSpec.mechanism`); the world file stays data and every such tool runs the catalogue's tested code. `install`
adds a mechanism to a world's entities and makes its tools; `implementations` gives the executor its functions;
`prepare_state` makes a seeded state satisfy every invariant; `violations` checks them. docs/mechanisms.md lists
each mechanism's rule and its test.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envgym.world.mechanisms.access import MECHANISMS as ACCESS
from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef
from envgym.world.mechanisms.inventory import MECHANISMS as INVENTORY
from envgym.world.mechanisms.money import MECHANISMS as MONEY
from envgym.world.mechanisms.records import MECHANISMS as RECORDS
from envgym.world.mechanisms.structure import MECHANISMS as STRUCTURE
from envgym.world.mechanisms.workflow import MECHANISMS as WORKFLOW
from envgym.world.spec import EntitySpec, MechanismTool, MechanismUse, SpecError, ToolSpec, WorldSpec

__all__ = ["CATALOGUE", "Arg", "Bound", "Installed", "Mechanism", "Refusal", "ToolDef", "arg_schema", "bound",
           "implementations", "install", "prepare_state", "violations"]

CATALOGUE: dict[str, Mechanism] = {m.name: m for m in (*INVENTORY, *MONEY, *WORKFLOW, *STRUCTURE, *ACCESS, *RECORDS)}


def mechanism(name: str) -> Mechanism:
    try:
        return CATALOGUE[name]
    except KeyError:
        raise SpecError(f"unknown mechanism {name!r}; the catalogue has {sorted(CATALOGUE)}") from None


def tool_defs(b: Bound) -> tuple[ToolDef, ...]:
    """The mechanism's tools for this use (a state machine has one per transition of its parameters)."""
    return b.m.expand(b) if b.m.expand is not None else b.m.tools


def arg_schema(b: Bound, arg: Arg) -> dict[str, Any]:
    """The JSON Schema of one argument."""
    text = arg.description.format(**words(b))
    if arg.kind == "key":
        return {"type": "string", "minLength": 1, "description": text}
    if arg.kind in ("int", "number"):
        return {"type": "integer" if arg.kind == "int" else "number", "minimum": arg.lo, "maximum": arg.hi,
                "description": text}
    if arg.kind == "enum":
        return {"type": "string", "enum": list(arg.choices or b.p(arg.choices_param)), "description": text}
    if arg.kind == "date":
        return {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$", "description": f"{text} (YYYY-MM-DD)"}
    if arg.kind == "time":
        return {"type": "string", "pattern": r"^\d{2}:\d{2}$", "description": f"{text} (HH:MM)"}
    if arg.kind == "bool":
        return {"type": "boolean", "description": text}
    if arg.kind == "lines":
        line = {"type": "object", "properties": {b.key(arg.role): {"type": "string", "minLength": 1},
                                                 "quantity": {"type": "integer", "minimum": 1, "maximum": 9}},
                "required": [b.key(arg.role), "quantity"], "additionalProperties": False}
        return {"type": "array", "items": line, "minItems": 1, "maxItems": int(arg.hi), "description": text}
    if arg.kind == "address":
        props = {"street": {"type": "string", "minLength": 1}, "city": {"type": "string", "minLength": 1},
                 "postcode": {"type": "string", "pattern": r"^\d{5}$"}}
        return {"type": "object", "properties": props, "required": sorted(props), "additionalProperties": False,
                "description": text}
    return {"type": "string", "minLength": 1, "description": text}


def words(b: Bound) -> dict[str, Any]:
    """What descriptions are formatted with: each role's singular words, with an article, and the parameters."""
    out: dict[str, Any] = {k: v for k, v in {**b.m.params, **b.use.params}.items()}
    out["blocked"] = " or ".join(str(s).replace("_", " ") for s in out.get("blocked_states", []))
    for role in b.m.roles:
        w = b.word(role)
        out[role] = w
        out[f"a_{role}"] = ("an " if w[0] in "aeiou" else "a ") + w
    return out


@dataclass(frozen=True)
class Installed:
    """A mechanism added to a world: the entities with its fields and tables, its tools, and the use."""

    entities: dict[str, EntitySpec]
    tools: list[ToolSpec]
    use: MechanismUse


def install(name: str, use_id: str, entities: dict[str, EntitySpec], bind: dict[str, str] | None = None,
            params: dict[str, Any] | None = None) -> Installed:
    """Add mechanism `name` to `entities` (its fields where they lack them, its tables) and make its tools."""
    m = mechanism(name)
    use = MechanismUse(id=use_id, mechanism=name, bind=dict(bind or {}), params=dict(params or {}))
    out = dict(entities)
    b = Bound(m, use, out)
    for role in m.roles:
        if b.ent(role) not in out:
            raise SpecError(f"mechanism {name}: role {role} is bound to {b.ent(role)!r}, not an entity of the world")
    for role, slots in m.fields.items():
        entity = out[b.ent(role)]
        extra = {b.f(role, s): spec for s, spec in slots.items() if b.f(role, s) not in entity.fields}
        if extra:
            out[b.ent(role)] = entity.model_copy(update={"fields": {**entity.fields, **extra}})
    for table, spec in m.tables(b).items():
        if table in out:
            raise SpecError(f"mechanism {name}: table {table!r} is already an entity of the world")
        out[table] = spec
    tools = []
    for td in tool_defs(b):
        props = {b.arg_name(n): arg_schema(b, a) for n, a in td.args.items()}
        required = [b.arg_name(n) for n, a in td.args.items() if not a.optional]
        tools.append(ToolSpec(
            name=b.arg_name(td.verb), description=td.summary.format(**words(b)),
            parameters={"type": "object", "properties": props, "required": required, "additionalProperties": False},
            labels=[] if td.writes else ["read_only"], writes=sorted({b.ent(w) for w in td.writes}) or None,
            mechanism=MechanismTool(use=use_id, role=td.verb)))
    return Installed(out, tools, use)


def bound(world: WorldSpec, use: MechanismUse) -> Bound:
    return Bound(mechanism(use.mechanism), use, world.entities)


def implementations(world: WorldSpec) -> dict[str, Callable[..., Any]]:
    """tool name -> fn(state, **args) for every mechanism tool of the world."""
    uses = {u.id: bound(world, u) for u in world.mechanisms}
    out: dict[str, Callable[..., Any]] = {}
    for tool in world.tools:
        if tool.mechanism is None:
            continue
        b = uses[tool.mechanism.use]
        td = next((t for t in tool_defs(b) if t.verb == tool.mechanism.role), None)
        if td is None:
            raise SpecError(f"world {world.name}: tool {tool.name}: mechanism {b.m.name} has no tool "
                            f"{tool.mechanism.role!r}")
        out[tool.name] = _runner(b, td)
    return out


def _runner(b: Bound, td: ToolDef) -> Callable[..., Any]:
    names = {b.arg_name(n): n for n in td.args}

    def run(state: State, **args: Any) -> Any:
        return td.run(b, state, {names[k]: v for k, v in args.items() if k in names})
    run.__name__ = b.arg_name(td.verb)
    return run


def prepare_state(world: WorldSpec, state: State) -> None:
    """Make a freshly seeded state satisfy every mechanism's invariant (in the order the world lists them)."""
    for use in world.mechanisms:
        b = bound(world, use)
        b.m.prepare(b, state)


def violations(world: WorldSpec, state: State) -> list[str]:
    """Every mechanism invariant the state breaks, as `use: what is wrong` (empty when all hold)."""
    out = []
    for use in world.mechanisms:
        b = bound(world, use)
        problem = b.m.invariant(b, state)
        if problem is not None:
            out.append(f"{use.id}: {problem}")
    return out
