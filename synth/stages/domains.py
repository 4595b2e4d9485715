"""Stage 1, domains: seed data models from the taxonomy, grown by structural operators into new domains.

Domain i is a seed blueprint of its category while the category has unused ones; later it is a child of an earlier
domain of the same category, made by one or two operators: specialize (a narrower enum, an audience), add an entity
(one-to-many from the account or from an owned entity), add a relation (many-to-many through a link entity), add a
workflow (a state machine), add a limit, add a field. Domain i depends only on domains before it, so the first n
domains of a bigger run are the domains of a run of n.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from synth.grammar import EXTRA_FIELDS, LINKS, POOL, WORKFLOWS, entity_problem, flow, quantity, state
from synth.lexicon import AUDIENCES
from synth.model import DomainModel, EntityModel, FieldModel, Limit
from synth.seeds import item_rng
from synth.taxonomy import DomainBlueprint, Taxonomy

MAX_ENTITIES = 6
_AUTH_PAIRS = [["email", "phone"], ["email", "postcode"], ["full_name", "phone"], ["phone", "postcode"],
               ["email", "full_name"]]


def _prefix(name: str, taken: set[str]) -> str:
    letters = "".join(w[0] for w in name.split("_")).upper()
    prefix = letters if len(letters) > 1 else name[:2].upper()
    while prefix in taken:
        prefix += "X"
    return prefix


def _entity(domain: list[EntityModel], name: str, **kw: object) -> EntityModel:
    return EntityModel(name=name, prefix=_prefix(name, {e.prefix for e in domain}), **kw)


def seed_domain(bp: DomainBlueprint, category: str, rng: random.Random, order: int) -> DomainModel:
    """The three-entity model of a taxonomy blueprint: account holders, a catalog, and records linking them."""
    act, asset, rec = bp.actor, bp.asset, bp.record
    ents: list[EntityModel] = []
    ents.append(_entity(ents, act.noun, count=rng.randint(12, 20), fields=[
        FieldModel(name="full_name", kind="name"), FieldModel(name="email", kind="email"),
        FieldModel(name="phone", kind="phone"), FieldModel(name="postcode", kind="postcode")]))
    measure = (FieldModel(name=asset.measure, kind="money", lo=asset.min, hi=asset.max, unit="USD")
               if asset.unit == "usd" else quantity(asset.measure, int(asset.min), int(asset.max), asset.unit))
    ents.append(_entity(ents, asset.noun, count=rng.randint(10, 16), catalog=True, fields=[
        FieldModel(name="name", kind="text"), FieldModel(name="kind", kind="enum", choices=list(asset.kinds)),
        measure, *( [FieldModel(name="currency", kind="currency", unit="USD")] if measure.kind == "money" else []),
        state(list(asset.states))]))
    open_states, closed = list(rec.open), "cancelled"
    ents.append(_entity(ents, rec.noun, count=rng.randint(30, 44), owner=f"{act.noun}_id", fields=[
        FieldModel(name=f"{act.noun}_id", kind="ref", ref=act.noun),
        FieldModel(name=f"{asset.noun}_id", kind="ref", ref=asset.noun),
        quantity(rec.qty, rec.qty_min, rec.qty_max), FieldModel(name="date", kind="date"),
        state([*open_states, closed])],
        workflow=flow((rec.cancel_verb, open_states, closed), ("confirm", [open_states[0]], open_states[1]))))
    auth = rng.choice(_AUTH_PAIRS)
    return DomainModel(name=bp.name, category=category, description=bp.description, root=bp.name,
                       account=act.noun, auth=auth,
                       entities=ents, seed=rng.randrange(2**31), order=order)


# ---------------------------------------------------------------- structural operators

Operator = Callable[[DomainModel, random.Random], DomainModel | None]


def specialize(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """Narrow an enum of the catalog (a specialised market) and resize the tables."""
    ents = []
    for e in d.entities:
        fields = [f.model_copy(update={"choices": sorted(rng.sample(f.choices, len(f.choices) - 1))})
                  if f.kind == "enum" and len(f.choices) >= 3 and e.catalog else f for f in e.fields]
        ents.append(e.model_copy(update={"fields": fields, "count": max(8, e.count + rng.randint(-4, 6))}))
    return d.model_copy(update={"entities": ents})


def add_entity(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """Attach an entity type from the pool that belongs in the domain's category: owned by the account, optionally
    under an owned entity it can be part of (`synth.grammar.entity_problem`)."""
    names = {e.name for e in d.entities}
    free = [n for n in sorted(POOL) if n not in names and entity_problem(n, d.category) is None]
    if len(d.entities) >= MAX_ENTITIES or not free:
        return None
    name = rng.choice(free)
    fields, steps = POOL[name](rng)
    refs = [FieldModel(name=f"{d.account}_id", kind="ref", ref=d.account)]
    record = d.owned()[0].name  # the taxonomy seed's record type (pool entities are appended after it)
    parents = [e for e in d.owned() if not e.link
               and entity_problem(name, d.category, e.name, parent_is_record=e.name == record) is None]
    if parents and rng.random() < 0.5:
        parent = rng.choice(parents)
        refs.append(FieldModel(name=parent.key, kind="ref", ref=parent.name))
    entity = _entity(d.entities, name, count=rng.randint(20, 40), owner=f"{d.account}_id",
                     fields=[*refs, *fields], workflow=steps)
    return d.model_copy(update={"entities": [*d.entities, entity]})


def add_relation(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """A many-to-many relation between an owned entity and the catalog, through a link entity."""
    names = {e.name for e in d.entities}
    links = [n for n in LINKS if n not in names]
    owned = [e for e in d.owned() if not e.link]
    others = [e for e in d.entities if e.catalog]
    if len(d.entities) >= MAX_ENTITIES or not links or not owned or not others:
        return None
    left, right = rng.choice(owned), rng.choice(others)
    entity = _entity(d.entities, rng.choice(links), count=rng.randint(25, 45), owner=f"{d.account}_id", link=True,
                     fields=[FieldModel(name=f"{d.account}_id", kind="ref", ref=d.account),
                             FieldModel(name=left.key, kind="ref", ref=left.name),
                             FieldModel(name=right.key, kind="ref", ref=right.name),
                             quantity("units", 1, 20)])
    return d.model_copy(update={"entities": [*d.entities, entity]})


def add_workflow(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """Give an owned entity without one a state machine on a new status field."""
    bare = [e for e in d.owned() if not e.workflow and not any(f.kind == "state" for f in e.fields)]
    if not bare:
        return None
    target = rng.choice(bare)
    states, steps = rng.choice(WORKFLOWS)
    changed = target.model_copy(update={"fields": [*target.fields, state(list(states))], "workflow": flow(*steps)})
    return d.model_copy(update={"entities": [changed if e.name == target.name else e for e in d.entities]})


def add_limit(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """A limit on a quantity or money field of an owned entity (writes above it are refused)."""
    options = [(e, f) for e in d.owned() for f in e.fields if f.kind in ("quantity", "money") and f.hi - f.lo >= 4]
    taken = {(x.entity, x.field) for x in d.limits}
    options = [(e, f) for e, f in options if (e.name, f.name) not in taken]
    if not options:
        return None
    e, f = rng.choice(options)
    value = round(f.lo + (f.hi - f.lo) * rng.choice([0.5, 0.6, 0.75, 0.8]))
    return d.model_copy(update={"limits": [*d.limits, Limit(entity=e.name, field=f.name, value=value)]})


def add_field(d: DomainModel, rng: random.Random) -> DomainModel | None:
    """A new typed field from the ontology on a non-account entity."""
    target = rng.choice([e for e in d.entities if e.name != d.account])
    new = [f for f in rng.choice(EXTRA_FIELDS)(rng) if f.name not in {x.name for x in target.fields}]
    if not new or (any(f.kind == "currency" for f in new) and target.of_kind("currency")):
        return None
    changed = target.model_copy(update={"fields": [*target.fields, *new]})
    return d.model_copy(update={"entities": [changed if e.name == target.name else e for e in d.entities]})


OPERATORS: dict[str, Operator] = {"specialize": specialize, "add_entity": add_entity, "add_relation": add_relation,
                                  "add_workflow": add_workflow, "add_limit": add_limit, "add_field": add_field}


def _child(parent: DomainModel, rng: random.Random, taken: set[str], order: int) -> DomainModel:
    child, applied = parent, list[str]()
    wanted = rng.randint(1, 3)
    # Draw until `wanted` operators applied (specialize always applies, so this ends).
    while len(applied) < wanted:
        name = rng.choice(sorted(OPERATORS))
        made = OPERATORS[name](child, rng)
        if made is not None:
            child, applied = made, [*applied, name]
    audience = rng.choice(AUDIENCES)
    name, n = f"{audience}_{parent.root}", 2
    while name in taken:
        name, n = f"{audience}_{parent.root}_{n}", n + 1
    return child.model_copy(update={
        "name": name, "parent": parent.name, "operators": [*parent.operators, *applied], "order": order,
        "seed": rng.randrange(2**31),
        "description": f"{parent.root_description(audience)}"})


def select_domains(taxonomy: Taxonomy, n: int, seed: int) -> list[DomainModel]:
    """`n` domains, in a fixed order that does not depend on `n`."""
    categories = sorted(taxonomy.categories)
    out: list[DomainModel] = []
    taken: set[str] = set()
    for i in range(n):
        category = categories[i % len(categories)]
        round_ = i // len(categories)
        rng = item_rng(seed, "domains", category, round_)
        seeds = taxonomy.categories[category].domains
        if round_ < len(seeds):
            domain = seed_domain(seeds[round_], category, rng, i)
        else:
            family = [d for d in out if d.category == category]
            domain = _child(rng.choice(family), rng, taken, i)
        taken.add(domain.name)
        out.append(domain)
    return out
