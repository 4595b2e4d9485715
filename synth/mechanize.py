"""Which business mechanisms (envgym.world.mechanisms) a domain's world uses, and how they bind to its entities.

Roles: the account entity is the party, the domain's first catalog the item, and its first owned record that names
both the record. A mechanism is plausible in a domain when it suits any word of the domain (its name, description
and entity names) or suits every domain; the suited ones come first, each group in a seeded shuffle, and up to
`MAX_MECHANISMS` are taken whose owned slots are disjoint (two mechanisms never write the same field or create the same rows), so every
invariant can hold in the composed world. The result is a pure function of the domain: the tools stage and the
world both call it and get the same uses.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any

from envgym.world.mechanisms import CATALOGUE, install
from envgym.world.mechanisms.base import Bound, Mechanism
from envgym.world.spec import EntitySpec, MechanismUse, SpecError, ToolSpec
from synth.model import DomainModel, EntityModel

MAX_MECHANISMS = 16
PARTY_TABLES = ("transfers", "ledger", "points_log", "role_changes")


@dataclass(frozen=True)
class Roles:
    party: EntityModel
    item: EntityModel
    record: EntityModel


@dataclass(frozen=True)
class Mechanized:
    """A domain's entities with its mechanisms installed, their tools (with the mechanism of each) and the uses."""

    entities: dict[str, EntitySpec]
    tools: list[tuple[ToolSpec, str]]
    uses: list[MechanismUse]


def roles(domain: DomainModel) -> Roles | None:
    party = domain.entity(domain.account)
    items = [e for e in domain.entities if e.catalog]
    for e in domain.owned():
        refs = {f.ref for f in e.of_kind("ref")}
        if not e.link and items and domain.account in refs and items[0].name in refs and e.of_kind("state"):
            return Roles(party, items[0], e)
    return None


def domain_words(domain: DomainModel) -> set[str]:
    text = " ".join([domain.name, domain.root, domain.description, *(e.name for e in domain.entities)]).lower()
    out = set()
    for w in re.split(r"[^a-z]+", text):
        if w:
            out |= {w, w.removesuffix("s"), w.removesuffix("es")}
    return out


def plausible(m: Mechanism, words: set[str]) -> bool:
    """A mechanism fits a domain when one of the words it suits is a word of the domain (or it suits any)."""
    return not m.suits or any(s in words for s in m.suits)


def _params(m: Mechanism, r: Roles) -> dict[str, Any]:
    status = r.record.field("status").choices
    sources = {s for t in r.record.workflow for s in t.source}
    open_states = [s for s in status if s in sources] or status[:1]
    closed = next((t.target for t in r.record.workflow if t.target not in sources), status[-1])
    blocked = [r.item.field("status").choices[-1]] if r.item.of_kind("state") else []
    out: dict[str, Any] = {}
    for name in m.params:
        if name == "open_states":
            out[name] = open_states
        elif name == "closed_state":
            out[name] = closed
        elif name == "blocked_states":
            out[name] = blocked
        elif name == "reviewable":
            out[name] = [open_states[-1]]
        elif name == "states":
            out[name] = list(status)
        elif name == "transitions":
            out[name] = [[list(t.source), t.target] for t in r.record.workflow]
    return out


def _bind(m: Mechanism, r: Roles, tables: list[str]) -> dict[str, str]:
    bind = {"party": r.party.plural, "item": r.item.plural, "record": r.record.plural, "record.status": "status"}
    qty = r.record.of_kind("quantity", "duration")
    if qty:
        bind["record.quantity"] = qty[0].name
    by_role = {"party": r.party, "item": r.item, "record": r.record}
    for role, slots in m.fields.items():
        # A field the mechanism adds never takes over a domain field of the same name (a ticket's own
        # "priority" is not an escalation counter): it gets the mechanism's name in front.
        taken = {f.name for f in by_role[role].fields} | {by_role[role].key}
        for slot in slots:
            if slot in taken:
                bind[f"{role}.{slot}"] = f"{m.name.split('_')[0]}_{slot}"
    for slot in tables:
        owner = r.party if slot in PARTY_TABLES else r.record
        bind[slot] = f"{owner.name}_{slot}"
    return bind


def _table_slots(m: Mechanism, r: Roles, entities: dict[str, EntitySpec]) -> list[str]:
    """The slots of the mechanism's own tables: with only its roles bound, each table is named by its slot."""
    roles_only = {"party": r.party.plural, "item": r.item.plural, "record": r.record.plural}
    return list(m.tables(Bound(m, MechanismUse(id="probe", mechanism=m.name, bind=roles_only), entities)))


def choose(domain: DomainModel) -> list[str]:
    """The mechanisms the domain's world uses, in install order."""
    r = roles(domain)
    if r is None:
        return []
    words = domain_words(domain)
    rng = random.Random(f"mechanisms:{domain.seed}")
    # Mechanisms that suit this domain's words go first, then those that suit any domain.
    suited = sorted(n for n, m in CATALOGUE.items() if m.suits and plausible(m, words))
    general = sorted(n for n, m in CATALOGUE.items() if not m.suits)
    rng.shuffle(suited)
    rng.shuffle(general)
    names = suited + general
    taken: set[str] = set()
    out: list[str] = []
    for name in names:
        bind = _bind(CATALOGUE[name], r, [])
        # Owned slots by the names they are bound to: two slots bound to one field are the same slot.
        owns = {f"{slot.partition('.')[0]}.{bind.get(slot, slot.partition('.')[2])}" for slot in CATALOGUE[name].owns}
        if owns & taken or len(out) >= MAX_MECHANISMS:
            continue
        taken |= owns
        out.append(name)
    return out


def mechanize(domain: DomainModel, entities: dict[str, EntitySpec], taken_names: set[str]) -> Mechanized:
    """Install the chosen mechanisms into `entities`; a mechanism whose tool or table names clash is left out."""
    r = roles(domain)
    tools: list[tuple[ToolSpec, str]] = []
    uses: list[MechanismUse] = []
    if r is None:
        return Mechanized(entities, tools, uses)
    names = set(taken_names)
    for name in choose(domain):
        m = CATALOGUE[name]
        try:
            made = install(name, name, entities, _bind(m, r, _table_slots(m, r, entities)), _params(m, r))
        except SpecError:
            continue
        if any(t.name in names for t in made.tools):
            continue
        entities = made.entities
        names |= {t.name for t in made.tools}
        tools += [(t, name) for t in made.tools]
        uses.append(made.use)
    return Mechanized(entities, tools, uses)


def owned_slots(uses: list[MechanismUse], r: Roles | None) -> set[tuple[str, str]]:
    """(entity, field) pairs and (entity, '*rows') that the world's mechanisms own: procedural tools that write
    them would break a mechanism's invariant, so the tools stage leaves them out."""
    if r is None:
        return set()
    plural = {"party": r.party.name, "item": r.item.name, "record": r.record.name}
    out = set()
    for use in uses:
        for slot in CATALOGUE[use.mechanism].owns:
            role, _, field = slot.partition(".")
            if role in plural:
                name = use.bind.get(slot, field)
                out.add((plural[role], "*rows" if field == "rows" else name))
    return out
