"""World state: tables of records, seeded generation with faker, snapshots, a canonical hash and diffs."""

from __future__ import annotations

import copy
import datetime
import decimal
import hashlib
import json
import random
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envgym.world.errors import UnknownEntityError
from envgym.world.spec import EntitySpec, FieldSpec, WorldSpec

if TYPE_CHECKING:
    from faker import Faker

Record = dict[str, Any]


def next_key(table: Mapping[str, Any], prefix: str = "", key_format: str = "{prefix}{index:04d}") -> str:
    """The key of a new record: the first free `key_format` from index len(table) up (a world's key format)."""
    index = len(table)
    while (key := key_format.format(prefix=prefix, index=index)) in table:
        index += 1
    return key


@dataclass(frozen=True)
class Change:
    """One difference between two states: a record added, removed or a field changed."""

    entity: str
    key: str
    kind: str  # "added" | "removed" | "changed"
    field: str | None = None
    before: Any = None
    after: Any = None


# Values that no one can change in place, so a copied record may share them with its original.
_ATOMIC: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes, datetime.date, datetime.datetime,
                                      datetime.time, decimal.Decimal})


def copy_record(value: Any) -> Any:
    """A deep copy of JSON-like data, several times faster than copy.deepcopy (other types fall back to it)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMIC else copy_record(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMIC else copy_record(v) for v in value]
    if kind in _ATOMIC:
        return value
    return copy.deepcopy(value)


class Table(dict[str, Record]):
    """One entity's records, copy-on-write: records shared with other states are copied on first access.

    A record whose key is not in `_owned` may be shared with the state this one was copied from (or with its
    copies) and must never be changed in place; every accessor that hands a record out copies it first, so a tool
    may mutate whatever it gets. `peek`, `peek_values` and `peek_items` hand out records without copying, for
    readers that never write (hashing, diffs, read-only tools).
    """

    __slots__ = ("_owned",)

    def __init__(self, records: dict[str, Record] | None = None, owned: bool = True):
        super().__init__(records or {})
        self._owned: set[str] = set(self) if owned else set()

    def _own(self, key: str, record: Record) -> Record:
        record = copy_record(record)
        dict.__setitem__(self, key, record)
        self._owned.add(key)
        return record

    def _own_all(self) -> None:
        if len(self._owned) != len(self):
            for key, record in list(dict.items(self)):
                if key not in self._owned:
                    self._own(key, record)

    def __getitem__(self, key: str) -> Record:
        record = dict.__getitem__(self, key)
        return record if key in self._owned else self._own(key, record)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._owned:
            return dict.get(self, key, default)
        if key not in self:
            return default
        return self._own(key, dict.__getitem__(self, key))

    def __setitem__(self, key: str, record: Record) -> None:
        dict.__setitem__(self, key, record)
        self._owned.add(key)

    def __delitem__(self, key: str) -> None:
        dict.__delitem__(self, key)
        self._owned.discard(key)

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            return dict.pop(self, key, *default)
        record = self[key]
        self.__delitem__(key)
        return record

    def popitem(self) -> tuple[str, Record]:
        key = next(reversed(self))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, record in dict(*args, **kwargs).items():
            self[key] = record

    def clear(self) -> None:
        dict.clear(self)
        self._owned.clear()

    def values(self) -> Any:
        self._own_all()
        return dict.values(self)

    def items(self) -> Any:
        self._own_all()
        return dict.items(self)

    # Overriding __iter__ keeps dict(table) and {**table} off CPython's fast path, which would read shared
    # records without copying them; they go through keys() and __getitem__ instead.
    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self)

    def copy(self) -> Table:
        return Table({key: copy_record(record) for key, record in dict.items(self)})

    def __copy__(self) -> Table:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Table:
        return self.copy()

    def __reduce__(self) -> Any:
        return (Table, (dict(dict.items(self)),))  # pickling copies the records anyway

    def __or__(self, other: Any) -> Table:  # type: ignore[override]
        merged = self.copy()
        merged.update(other)
        return merged

    def __ior__(self, other: Any) -> Table:  # type: ignore[override]
        self.update(other)
        return self

    def peek(self, key: str) -> Record | None:
        """The record without a copy: read it, never change it."""
        return dict.get(self, key)

    def peek_values(self) -> Iterable[Record]:
        """The records without copies: read them, never change them."""
        return dict.values(self)

    def peek_items(self) -> Iterable[tuple[str, Record]]:
        """(key, record) pairs without copies: read them, never change them."""
        return dict.items(self)

    def fork(self) -> Table:
        """A copy that shares every record with this table; from now on both copy a record before handing it out."""
        self._owned.clear()
        child = Table.__new__(Table)
        dict.update(child, dict.items(self))
        child._owned = set()
        return child



def _raw_items(table: dict[str, Record]) -> Iterable[tuple[str, Record]]:
    return dict.items(table)


@dataclass(eq=False)
class WorldState:
    """The mutable state of one episode: `tables[entity][key] -> record`.

    Tables are copy-on-write (`Table`): `copy()` shares records with the copy instead of copying the world, and a
    record is copied the first time either side hands it out. Read and write records through the tables as plain
    dicts; whatever they hand out is this state's own.

    `resources` holds per-episode objects that are not data (a sandbox handle, a client); it is never hashed,
    snapshotted or shown to the agent.
    """

    tables: dict[str, dict[str, Record]]
    resources: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tables = {e: t if isinstance(t, Table) else Table(t) for e, t in self.tables.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorldState):
            return NotImplemented
        return self.plain() == other.plain() and self.resources == other.resources

    def plain(self) -> dict[str, dict[str, Record]]:
        """The tables as plain dicts over the current records, without copies: read them, never change them."""
        return {entity: dict(_raw_items(table)) for entity, table in self.tables.items()}

    def table(self, entity: str) -> dict[str, Record]:
        try:
            return self.tables[entity]
        except KeyError:
            raise UnknownEntityError(f"unknown entity {entity!r}; the world has {sorted(self.tables)}") from None

    def get(self, entity: str, key: str) -> Record | None:
        return self.table(entity).get(key)

    def peek(self, entity: str, key: str) -> Record | None:
        """A record for reading only (never change it): no copy is made."""
        return dict.get(self.table(entity), key)

    def put(self, entity: str, key: str, record: Record) -> None:
        self.table(entity)[key] = record

    def delete(self, entity: str, key: str) -> Record | None:
        return self.table(entity).pop(key, None)

    def find(self, entity: str, **match: Any) -> list[Record]:
        table = self.table(entity)
        return [table[k] for k, r in _raw_items(table) if all(r.get(f) == v for f, v in match.items())]

    def snapshot(self) -> WorldState:
        """A frozen copy of the tables to `restore` later (resources are not data and are left out)."""
        return self.copy()

    def restore(self, snapshot: WorldState) -> None:
        """Go back to `snapshot` (it stays reusable): the tables share its records again."""
        self.tables = snapshot.copy().tables

    def copy(self) -> WorldState:
        """An independent state with the same records, made without copying them (see `Table`)."""
        return WorldState({e: _fork(t) for e, t in self.tables.items()})

    # Resources are process-local handles (a sandbox, a client, a finalizer): pickles and deep copies carry the
    # data only, as `copy` does, and whoever needs a resource acquires its own.
    def __getstate__(self) -> dict[str, Any]:
        return {"tables": self.tables, "resources": {}}

    def canonical_json(self) -> str:
        return json.dumps(self.plain(), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)

    def hash(self) -> str:
        """sha256 of the canonical JSON of all tables: equal for equal data, whatever the insertion order."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def diff(self, other: WorldState) -> list[Change]:
        """Changes that turn `self` into `other`, sorted by entity, key and field."""
        changes: list[Change] = []
        for entity in sorted(set(self.tables) | set(other.tables)):
            mine = dict(_raw_items(self.tables.get(entity, {})))
            theirs = dict(_raw_items(other.tables.get(entity, {})))
            for key in sorted(set(mine) | set(theirs)):
                a, b = mine.get(key), theirs.get(key)
                if a is None and b is not None:
                    changes.append(Change(entity, key, "added", after=b))
                elif b is None and a is not None:
                    changes.append(Change(entity, key, "removed", before=a))
                elif a != b and a is not None and b is not None:
                    for fname in sorted(set(a) | set(b)):
                        if a.get(fname) != b.get(fname):
                            changes.append(Change(entity, key, "changed", fname, a.get(fname), b.get(fname)))
        return changes


def _fork(table: dict[str, Record]) -> Table:
    if isinstance(table, Table):
        return table.fork()
    # A plain dict put into `tables` by hand: its owner may still change it, so the copy cannot share it.
    return Table({k: copy_record(r) for k, r in table.items()})


def _order_entities(entities: dict[str, EntitySpec]) -> list[str]:
    """Entities in dependency order (referenced tables first), ties broken by declaration order."""
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order or name in visiting:
            return
        visiting.add(name)
        for f in entities[name].fields.values():
            if f.ref and f.ref != name:
                visit(f.ref)
        visiting.discard(name)
        order.append(name)

    for name in entities:
        visit(name)
    return order


def _generate_value(
    spec: FieldSpec,
    record: Record,
    index: int,
    rng: random.Random,
    fake: Faker,
    tables: dict[str, dict[str, Record]],
) -> Any:
    if spec.value is not None:
        return copy.deepcopy(spec.value)
    if spec.template is not None:
        return spec.template.format(index=index, **record)
    if spec.ref is not None:
        keys = sorted(tables.get(spec.ref, {}))
        if spec.type == "list":
            fewest, most = spec.ref_count or (1, 3)
            return sorted(rng.sample(keys, min(len(keys), rng.randint(fewest, most)))) if keys else []
        return rng.choice(keys) if keys else None
    if spec.choices is not None:
        return copy.deepcopy(rng.choice(spec.choices))
    if spec.faker is not None:
        value = getattr(fake, spec.faker)(**spec.faker_args)
        if spec.type == "string":
            return str(value)
        return value
    lo: float = spec.min if spec.min is not None else 0
    hi: float = spec.max if spec.max is not None else 1000
    if spec.type == "integer":
        return rng.randint(int(lo), int(hi))
    if spec.type == "number":
        return round(rng.uniform(lo, hi), spec.decimals if spec.decimals is not None else 2)
    if spec.type == "boolean":
        return rng.random() < 0.5
    if spec.type == "list":
        return []
    if spec.type == "object":
        return {}
    return fake.word()


def _identity(value: Any) -> str:
    """A hashable stand-in for any JSON value, for uniqueness checks (lists and dicts included)."""
    return json.dumps(value, sort_keys=True, default=str)


_FAKERS: dict[str, Faker] = {}


def _faker(locale: str) -> Faker:
    """One Faker per locale, re-seeded per entity (building one costs ~10 ms; seeding gives the same values)."""
    from faker import Faker  # imported here: it is slow to import and only world generation needs it

    if locale not in _FAKERS:
        _FAKERS[locale] = Faker(locale)
    return _FAKERS[locale]


def generate_state(world: WorldSpec, seed: int | None = None) -> WorldState:
    """Build the initial records of a world from its seed (or `seed`): same seed, same records, same hash."""
    seed = world.seed if seed is None else seed
    tables: dict[str, dict[str, Record]] = {}
    for name in _order_entities(world.entities):
        entity = world.entities[name]
        rng = random.Random(f"{seed}:{name}")
        fake = _faker(world.locale)
        fake.seed_instance(f"{seed}:{name}")
        table: dict[str, Record] = {}
        seen: dict[str, set[str]] = {f: set() for f, s in entity.fields.items() if s.unique}
        for index in range(entity.count):
            record: Record = {}
            for fname, fspec in entity.fields.items():
                if fname == entity.key and fspec.faker is None and fspec.template is None:
                    record[fname] = entity.key_format.format(prefix=entity.prefix, index=index)
                    continue
                value = _generate_value(fspec, record, index, rng, fake, tables)
                if fname in seen:
                    for _ in range(100):
                        if _identity(value) not in seen[fname]:
                            break
                        value = _generate_value(fspec, record, index, rng, fake, tables)
                    seen[fname].add(_identity(value))
                record[fname] = value
            table[str(record[entity.key])] = record
        tables[name] = table
    return WorldState(tables)
