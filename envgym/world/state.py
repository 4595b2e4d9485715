"""World state: tables of records, seeded generation with faker, snapshots, a canonical hash and diffs."""

from __future__ import annotations

import copy
import hashlib
import json
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from envgym.world.errors import UnknownEntityError
from envgym.world.spec import EntitySpec, FieldSpec, WorldSpec
from envgym.world.table import CANONICAL, Record, Table, copy_record, fork_table, next_key, raw_items

__all__ = ["Change", "Record", "Table", "WorldState", "copy_record", "generate_state", "next_key"]

if TYPE_CHECKING:
    from faker import Faker


@dataclass(frozen=True)
class Change:
    """One difference between two states: a record added, removed or a field changed."""

    entity: str
    key: str
    kind: str  # "added" | "removed" | "changed"
    field: str | None = None
    before: Any = None
    after: Any = None


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
    # The last hash: (entity names, the tables' canonical texts, digest). A read-only table hands back the very
    # same text object until a record of it is handed out (`Table.canonical_json`), and strings never change, so
    # the same names and the same text objects mean the same digest. Kept across `copy` (forks of a read-only
    # table find the same texts), never pickled.
    _digest: tuple[tuple[str, ...], tuple[str, ...], str] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.tables = {e: t if isinstance(t, Table) else Table(t) for e, t in self.tables.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, WorldState):
            return NotImplemented
        return self.plain() == other.plain() and self.resources == other.resources

    def plain(self) -> dict[str, dict[str, Record]]:
        """The tables as plain dicts over the current records, without copies: read them, never change them."""
        return {entity: dict(raw_items(table)) for entity, table in self.tables.items()}

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
        return [table[k] for k, r in raw_items(table) if all(r.get(f) == v for f, v in match.items())]

    def snapshot(self) -> WorldState:
        """A frozen copy of the tables to `restore` later (resources are not data and are left out)."""
        return self.copy()

    def restore(self, snapshot: WorldState) -> None:
        """Go back to `snapshot` (it stays reusable): the tables share its records again."""
        self.tables = snapshot.copy().tables

    def copy(self) -> WorldState:
        """An independent state with the same records, made without copying them (see `Table`)."""
        forked = WorldState({e: fork_table(t) for e, t in self.tables.items()})
        forked._digest = self._digest
        return forked

    # Resources are process-local handles (a sandbox, a client, a finalizer): pickles and deep copies carry the
    # data only, as `copy` does, and whoever needs a resource acquires its own.
    def __getstate__(self) -> dict[str, Any]:
        return {"tables": self.tables, "resources": {}, "_digest": None}

    def _table_texts(self) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
        """(sorted entity names, each table's canonical text), or None when a table is not a `Table`."""
        tables = self.tables
        if not all(type(e) is str and isinstance(t, Table) for e, t in tables.items()):
            return None
        names = tuple(sorted(tables))
        return names, tuple(tables[e].canonical_json() for e in names)  # type: ignore[attr-defined]

    @staticmethod
    def _join(names: tuple[str, ...], texts: tuple[str, ...]) -> str:
        return "{" + ",".join(f"{CANONICAL.encode(e)}:{t}" for e, t in zip(names, texts, strict=True)) + "}"

    def canonical_json(self) -> str:
        """The tables as JSON with sorted keys, no spaces and unicode as is (`table.CANONICAL`)."""
        parts = self._table_texts()
        return CANONICAL.encode(self.plain()) if parts is None else self._join(*parts)

    def hash(self) -> str:
        """sha256 of the canonical JSON of all tables: equal for equal data, whatever the insertion order.

        The scripted user, the per-call rewards and `info` ask for it after every turn, mostly of a world that no
        turn changed: then every table hands back the text it gave last time and the digest is not computed again.
        """
        parts = self._table_texts()
        if parts is None:
            return hashlib.sha256(CANONICAL.encode(self.plain()).encode()).hexdigest()
        names, texts = parts
        memo = self._digest
        if memo is not None and memo[0] == names and all(a is b for a, b in zip(memo[1], texts, strict=True)):
            return memo[2]
        digest = hashlib.sha256(self._join(names, texts).encode()).hexdigest()
        self._digest = (names, texts, digest)
        return digest

    def diff(self, other: WorldState) -> list[Change]:
        """Changes that turn `self` into `other`, sorted by entity, key and field."""
        changes: list[Change] = []
        for entity in sorted(set(self.tables) | set(other.tables)):
            mine = dict(raw_items(self.tables.get(entity, {})))
            theirs = dict(raw_items(other.tables.get(entity, {})))
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
    state = WorldState(tables)
    if world.mechanisms:  # only worlds with mechanisms pay for the import
        from envgym.world.mechanisms import prepare_state

        prepare_state(world, state)
    return state
