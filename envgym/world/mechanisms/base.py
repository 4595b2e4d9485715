"""The mechanism interface: one business rule over a world's tables, with its tools, its invariant and its flows.

A `Mechanism` names the entity roles it works over (`party`: the people served, `item`: what they use, `record`:
what links them, each record naming one party and one item), the fields it needs on them (`fields`, added where the
world lacks them), the tables of its own it writes (`tables`: ledgers, audit rows, links) and its tools
(`ToolDef`). A world uses it through a `MechanismUse` (spec.py): `bind` maps roles and `role.field` slots to the
world's own names. `Bound` is a mechanism seen through one use: every table, field and key name it reads goes
through it, so one implementation serves every world.

Contracts: `prepare(b, state)` makes a seeded state satisfy the invariant (seeded values are random);
`invariant(b, state)` returns None or what is violated, and must hold after any sequence of calls, refused or not;
a refused call raises `Refusal` and changes nothing.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from envgym.world.errors import ToolError
from envgym.world.spec import EntitySpec, FieldSpec, MechanismUse
from envgym.world.table import Record, next_key

ROLES = ("party", "item", "record")
DEFAULT_ENTITY = {"party": "parties", "item": "items", "record": "records"}
ZERO: dict[str, Any] = {"integer": 0, "number": 0.0, "boolean": False, "list": [], "object": {}}
ArgKind = Literal["key", "int", "number", "enum", "text", "date", "time", "bool", "lines", "address"]


class State(Protocol):
    """What a mechanism needs of a world state (envgym.world.state.WorldState is one; the mechanisms do not import
    it, so the state can prepare itself with them)."""

    def table(self, entity: str) -> dict[str, Record]: ...

    def peek(self, entity: str, key: str) -> Record | None: ...


class Refusal(ToolError):
    """A call the mechanism's rule refuses; nothing was changed. `kind` is a ToolErrorKind value."""

    def __init__(self, message: str, kind: str = "precondition"):
        super().__init__(message, kind)


@dataclass(frozen=True)
class Arg:
    """One tool argument. `key`: the key of a `role` record; numbers range over [lo, hi]; `enum` over `choices` or
    the parameter named by `choices_param`; `lines` is a list of {role key, quantity} objects (1 to `hi` of
    them); `address` an object of street, city and a five-digit postcode. Names in `ToolDef.args` may be `@role` (that role's key field, e.g.
    `order_id`) or hold `{party}`, `{item}`, `{record}` (the roles' singular names)."""

    kind: ArgKind
    description: str
    role: str = ""
    lo: float = 0
    hi: float = 0
    choices: tuple[str, ...] = ()
    choices_param: str = ""
    optional: bool = False


@dataclass(frozen=True)
class ToolDef:
    """A tool of a mechanism. Its name is `verb` with `{party}`, `{item}`, `{record}` (singular names) filled in;
    `summary` is its description, formatted with the roles' words and the use's parameters. `run(b, state, args)`
    gets the arguments under their `args` names and returns a JSON value or raises `Refusal`. `writes` names the
    roles and table slots it may change (empty: a read). `reaches` is the state a transition reaches."""

    verb: str
    summary: str
    args: dict[str, Arg]
    run: Callable[[Bound, State, dict[str, Any]], Any]
    writes: tuple[str, ...] = ()
    reaches: str | None = None


@dataclass(frozen=True)
class Mechanism:
    """One business rule (see the module docstring). `params` are the defaults of its parameters; `flows` are tool
    verbs in an order a task can chain them, each later call taking an id or value an earlier one returned.
    `owns`: the `role.field` slots it writes or whose meaning its invariant depends on, and `role.rows` where it
    creates or deletes that role's records; two mechanisms owning a slot in common never share a world. `suits`:
    words of the domains it is plausible in (synth matches them against a domain's words); empty: any domain.
    `expand(b)`, where given, makes the tools from the use's parameters instead of `tools` (a state machine's
    transitions)."""

    name: str
    rule: str
    roles: tuple[str, ...]
    tools: tuple[ToolDef, ...]
    invariant: Callable[[Bound, State], str | None]
    prepare: Callable[[Bound, State], None] = lambda b, s: None
    fields: dict[str, dict[str, FieldSpec]] = field(default_factory=dict)
    tables: Callable[[Bound], dict[str, EntitySpec]] = lambda b: {}
    params: dict[str, Any] = field(default_factory=dict)
    flows: tuple[tuple[str, ...], ...] = ()
    owns: tuple[str, ...] = ()
    suits: tuple[str, ...] = ()
    expand: Callable[[Bound], tuple[ToolDef, ...]] | None = None

    def tool(self, verb: str) -> ToolDef:
        return next(t for t in self.tools if t.verb == verb)


class Bound:
    """A mechanism seen through one use: the world's names for its roles, fields and tables, and its parameters."""

    def __init__(self, mechanism: Mechanism, use: MechanismUse, entities: dict[str, EntitySpec]):
        self.m, self.use, self.entities = mechanism, use, entities

    def ent(self, slot: str) -> str:
        """The entity (table) name of a role or table slot."""
        return self.use.bind.get(slot, DEFAULT_ENTITY.get(slot, slot))

    def f(self, role: str, slot: str) -> str:
        """The field name of `role.slot` (the slot's own name unless bound)."""
        return self.use.bind.get(f"{role}.{slot}", slot)

    def key(self, slot: str) -> str:
        return self.entities[self.ent(slot)].key

    def ref(self, role: str, to: str) -> str:
        """The field of `role` records that holds a `to` key (the key's name unless bound)."""
        return self.use.bind.get(f"{role}.{to}", self.key(to))

    def one(self, slot: str) -> str:
        """The singular name of a slot's entity (`orders` -> `order`), from its key field."""
        return self.key(slot).removesuffix("_id")

    def word(self, slot: str) -> str:
        return self.one(slot).replace("_", " ")

    def p(self, name: str) -> Any:
        return self.use.params.get(name, self.m.params.get(name))

    def arg_name(self, name: str) -> str:
        if name.startswith("@"):
            return self.key(name[1:])
        return name.format(**{r: self.one(r) for r in self.m.roles})

    # ---------------------------------------------------------------- state access
    def rows(self, state: State, slot: str) -> Iterable[Record]:
        """The records of a slot's table, for reading only."""
        return dict.values(state.table(self.ent(slot)))

    def peek(self, state: State, slot: str, key: Any) -> Record | None:
        return state.peek(self.ent(slot), str(key))

    def must(self, state: State, slot: str, key: Any) -> Record:
        """The record for reading; a missing one is refused as not found."""
        found = state.peek(self.ent(slot), str(key))
        if found is None:
            raise Refusal(f"no {self.word(slot) if slot in ROLES else slot.rstrip('s')} with id {key}", "not_found")
        return found

    def usable(self, state: State, key: Any) -> Record:
        """The item for writing, refused when missing or in one of the use's `blocked_states` (a delisted, closed
        or offline item takes no new records)."""
        item = self.get(state, "item", key)
        if item.get(self.f("item", "status")) in (self.p("blocked_states") or []):
            raise Refusal(f"{self.word('item')} {key} is {item[self.f('item', 'status')]}; it takes no new "
                          f"{self.word('record') if 'record' in self.m.roles else 'requests'}")
        return item

    def get(self, state: State, slot: str, key: Any) -> Record:
        """The record for writing (this state's own copy); a missing one is refused as not found."""
        table = state.table(self.ent(slot))
        if str(key) not in table:
            raise Refusal(f"no {self.word(slot)} with id {key}", "not_found")
        return table[str(key)]

    def insert(self, state: State, slot: str, record: Record) -> Record:
        """Add a record under a new key (the entity's key format); returns it with its key."""
        spec = self.entities[self.ent(slot)]
        table = state.table(self.ent(slot))
        key = next_key(table, spec.prefix, spec.key_format)
        # Fields other mechanisms added to the table start at their declared value or the type's zero, so every
        # mechanism reads a new record the way it reads a seeded one.
        blank = {f: copy.deepcopy(fs.value) if fs.value is not None else ZERO.get(fs.type)
                 for f, fs in spec.fields.items()}
        made = {**blank, spec.key: key, **record}
        table[key] = made
        return made

    def delete(self, state: State, slot: str, key: str) -> None:
        del state.table(self.ent(slot))[key]

    def each(self, state: State, slot: str) -> list[Record]:
        """Every record of a slot's table, for writing (prepare's pass over seeded data)."""
        table = state.table(self.ent(slot))
        return [table[k] for k in list(table)]

    def log(self, slot: str, key: str, prefix: str, fields: dict[str, FieldSpec]) -> dict[str, EntitySpec]:
        """A table of the mechanism's own rows (empty when seeded), under the slot's bound name."""
        return {self.ent(slot): EntitySpec(key=key, prefix=prefix, count=0, fields={key: FieldSpec(), **fields})}

    def refs(self, *roles: str) -> dict[str, FieldSpec]:
        """Reference fields to the roles' records, named by their keys (for `log` tables)."""
        return {self.key(r): FieldSpec(ref=self.ent(r)) for r in roles}


def money(value: float) -> float:
    """Money is kept to the cent."""
    return round(value + 0.0, 2)


def seeded(b: Bound, salt: str) -> random.Random:
    """A deterministic rng for `prepare`: the same world gives the same prepared state."""
    return random.Random(f"{b.use.id}:{b.m.name}:{salt}")
