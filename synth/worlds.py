"""World materialization: a domain blueprint becomes entities (seeded tables) in the world format."""

from __future__ import annotations

import random

from envgym.world.spec import EntitySpec, FieldSpec
from synth.taxonomy import DomainBlueprint

CANCELLED = "cancelled"


def _prefix(noun: str, taken: set[str]) -> str:
    letters = "".join(w[0] for w in noun.split("_")).upper()
    prefix = letters if len(letters) > 1 else noun[:2].upper()
    while prefix in taken:
        prefix += "X"
    taken.add(prefix)
    return prefix


def domain_entities(bp: DomainBlueprint, rng: random.Random) -> dict[str, EntitySpec]:
    """Three tables: actors (who), assets (what, with a measure and states), records (actor x asset x quantity)."""
    taken: set[str] = set()
    a, s, r = bp.actor, bp.asset, bp.record
    actors = EntitySpec(key=f"{a.noun}_id", prefix=_prefix(a.noun, taken), count=rng.randint(20, 30), fields={
        f"{a.noun}_id": FieldSpec(),
        "name": FieldSpec(faker="name"),
        "email": FieldSpec(faker="email", unique=True),
        "phone": FieldSpec(faker="phone_number"),
        "tier": FieldSpec(choices=["basic", "plus", "premium"]),
    }, description=f"{a.entity.replace('_', ' ')} of the service")
    decimals = 0 if s.max - s.min >= 50 else 1
    assets = EntitySpec(key=f"{s.noun}_id", prefix=_prefix(s.noun, taken), count=rng.randint(16, 24), fields={
        f"{s.noun}_id": FieldSpec(),
        "kind": FieldSpec(choices=list(s.kinds)),
        "label": FieldSpec(faker="last_name"),
        "name": FieldSpec(template="{label} {kind}"),
        "location": FieldSpec(faker="city"),
        "status": FieldSpec(choices=list(s.states)),
        s.measure: FieldSpec(type="number", min=s.min, max=s.max, decimals=decimals,
                             description=f"in {s.unit}"),
    }, description=f"{s.entity.replace('_', ' ')} ({', '.join(s.kinds)})")
    records = EntitySpec(key=f"{r.noun}_id", prefix=_prefix(r.noun, taken), count=rng.randint(36, 50), fields={
        f"{r.noun}_id": FieldSpec(),
        f"{a.noun}_id": FieldSpec(ref=a.entity),
        f"{s.noun}_id": FieldSpec(ref=s.entity),
        "status": FieldSpec(choices=[*r.open, CANCELLED]),
        r.qty: FieldSpec(type="integer", min=r.qty_min, max=r.qty_max),
        "cancel_reason": FieldSpec(value=""),
    }, description=f"{r.entity.replace('_', ' ')} linking {a.entity} to {s.entity}")
    return {a.entity: actors, s.entity: assets, r.entity: records}
