"""Stage 2, worlds: a domain's data model becomes entities in the world format (seeded tables, no code), and with
its verified tools a whole world: policy text, system prompt, and the rules the verifier checks."""

from __future__ import annotations

import random
from typing import Any

from envgym.world.spec import EntitySpec, FieldSpec, PolicyRules, ToolSpec, WorldSpec
from synth.lexicon import CITIES, STREETS, WORDS, a, plural, words
from synth.mechanize import mechanize
from synth.model import DomainModel, EntityModel, FieldModel, ToolRecord


def _dates(rng: random.Random, n: int = 40) -> list[str]:
    return sorted({f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}" for _ in range(n)})


def _times(rng: random.Random) -> list[str]:
    return sorted({f"{rng.randint(7, 19):02d}:{rng.choice(['00', '15', '30', '45'])}" for _ in range(16)})


def field_spec(f: FieldModel, entity: EntityModel, rng: random.Random) -> FieldSpec:
    """How the seeded values of one field are generated (deterministic given the world seed)."""
    match f.kind:
        case "ref":
            return FieldSpec(ref=plural(f.ref or ""), description=f"the {words(f.ref or '')}")
        case "name":
            return FieldSpec(faker="name")
        case "email":
            return FieldSpec(faker="email", unique=True)
        case "phone":
            return FieldSpec(faker="numerify", faker_args={"text": "555-###-####"}, unique=True)
        case "postcode":
            return FieldSpec(faker="numerify", faker_args={"text": "#####"})
        case "address":
            return FieldSpec(choices=[f"{rng.randint(1, 99)} {s}, {rng.choice(CITIES)}" for s in STREETS])
        case "money":
            return FieldSpec(type="number", min=f.lo, max=f.hi, decimals=2, description=f"in {f.unit}")
        case "currency":
            return FieldSpec(value=f.unit)
        case "date":
            return FieldSpec(choices=_dates(rng), description="YYYY-MM-DD")
        case "time":
            return FieldSpec(choices=_times(rng), description="HH:MM")
        case "duration" | "quantity":
            return FieldSpec(type="integer", min=f.lo, max=f.hi, description=f"in {f.unit}" if f.unit else "")
        case "enum" | "state":
            return FieldSpec(choices=list(f.choices))
        case "list":
            return FieldSpec(type="list", choices=[sorted(rng.sample(f.choices, k)) for k in (1, 2, 2, 3)])
        case "code":
            return FieldSpec(template=entity.prefix + "-{index:05d}", unique=True)
        case _:  # text: a name-like label for catalogs, a note otherwise
            if f.name == "name":
                return FieldSpec(template="{label} " + words(entity.name), description="unique name")
            return FieldSpec(choices=list(f.choices))


def domain_entities(domain: DomainModel) -> dict[str, EntitySpec]:
    """The world's entities, keyed by plural name; catalog names are unique so a user can name a record."""
    rng = random.Random(domain.seed)
    out: dict[str, EntitySpec] = {}
    for e in domain.entities:
        fields = {e.key: FieldSpec()}
        if any(f.name == "name" and f.kind == "text" for f in e.fields):
            labels = [w.capitalize() for w in rng.sample(WORDS, len(WORDS))]
            fields["label"] = FieldSpec(choices=labels, unique=True)
        for f in e.fields:
            fields[f.name] = field_spec(f, e, rng)
        count = min(e.count, len(WORDS)) if "label" in fields else e.count
        out[e.plural] = EntitySpec(key=e.key, prefix=e.prefix, count=count, fields=fields,
                                   description=f"{words(e.plural)} of the service")
    return out


def rules_for(domain: DomainModel, tools: list[ToolRecord]) -> dict[str, Any]:
    """The policy rules as data: which tools authenticate, which touch account data, what must be confirmed."""
    account_side = {domain.account, *(e.name for e in domain.owned())}
    auth = [t.spec["name"] for t in tools if t.operator == "authenticate"]
    requires = [t.spec["name"] for t in tools if t.operator != "authenticate" and t.entity in account_side]
    return {"authenticate_with": auth, "requires_auth": requires, "confirm_writes": True,
            "no_unrequested_writes": True}


def policy_text(domain: DomainModel, tools: list[ToolSpec], rules: dict[str, Any]) -> str:
    acct = words(domain.account)
    writes = [t.name for t in tools if not t.read_only]
    facts = " and ".join(words(f) for f in domain.auth)
    return "\n".join([
        f"- Verify the {acct} ({', '.join(rules['authenticate_with'])}, with their {facts}) before reading or "
        "changing anything of theirs; ask for each fact you need, never guess it.",
        f"- Before each change ({', '.join(writes)}), say what you will do and get an explicit yes.",
        "- Make no change the user did not ask for; one change per confirmation.",
        "- Use only ids and values you were given or that a tool returned.",
        "- Answer with the exact value the tools give, once; never offer a list of guesses.",
    ])


def domain_world(domain: DomainModel, tools: list[ToolRecord], max_steps: int) -> WorldSpec:
    """The environment's world: entities, verified tools, policy, and the synthesis record in `meta.synth`."""
    specs = [ToolSpec.model_validate(t.spec) for t in tools]
    rules = rules_for(domain, tools)
    acct = domain.entity(domain.account)
    system = (f"You are the assistant of a service for {domain.description[0].lower()}"
              f"{domain.description[1:].rstrip('.')}. You help {a(acct.label)} with their "
              f"{', '.join(words(e.plural) for e in domain.owned())} using only the tools below, and you follow "
              "the policy.")
    mech = mechanize(domain, domain_entities(domain), set())
    return WorldSpec(
        name=domain.name, description=f"[{domain.category}] {domain.description}", seed=domain.seed,
        entities=mech.entities, mechanisms=mech.uses, tools=specs, policy=policy_text(domain, specs, rules),
        system_prompt=system, max_steps=max_steps, rules=PolicyRules.model_validate(rules),
        meta={"synth": {"category": domain.category, "domain": domain.name, "parent": domain.parent,
                        "root": domain.root, "operators": domain.operators, "order": domain.order,
                        "tools": {t.spec["name"]: {"operator": t.operator, "mutations": t.mutations,
                                                   "entity": t.entity} for t in tools},
                        "model": domain.model_dump(mode="json", exclude_defaults=True)}})
