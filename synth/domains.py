"""Stage 1, domains: hierarchical evolution from taxonomy categories into specific domains (K2, WizardLM-style).

Round 0 takes each category's first seed domain, round 1 the second, and so on; once a category's seed domains
are used up, later rounds evolve a child from one of them: in breadth (a new audience, so a new sibling domain)
and in depth (a narrower set of asset kinds, different table sizes). Categories are visited in sorted order, so
`n` domains always cover min(n, #categories) categories. With a chat model, the evolved child's description is
proposed by the model (through the record/replay cache); the structure stays procedural and verifiable.
"""

from __future__ import annotations

import random
from typing import Any

from envgym.llm import ChatModel
from synth.seeds import item_rng
from synth.taxonomy import DomainBlueprint, Taxonomy

AUDIENCES = ["campus", "community", "enterprise", "family", "municipal", "nonprofit", "regional", "rural",
             "startup", "premium", "mobile", "wholesale"]


def _evolve(parent: DomainBlueprint, rng: random.Random, taken: set[str]) -> DomainBlueprint:
    audience = next(a for a in rng.sample(AUDIENCES, len(AUDIENCES)) if f"{a}_{parent.name}" not in taken)
    kinds = sorted(rng.sample(parent.asset.kinds, rng.randint(2, len(parent.asset.kinds))))
    return parent.model_copy(update={
        "name": f"{audience}_{parent.name}",
        "description": f"{parent.description.rstrip('.')}, specialised for {audience} customers "
                       f"({', '.join(kinds)} only).",
        "asset": parent.asset.model_copy(update={"kinds": kinds}),
    })


def _propose_description(model: ChatModel, category: str, blueprint: DomainBlueprint) -> str:
    prompt = (f"Category: {category}. Write one sentence describing the application domain "
              f"'{blueprint.name.replace('_', ' ')}', which manages {blueprint.asset.entity} and "
              f"{blueprint.record.entity} for {blueprint.actor.entity}. Reply with the sentence only.")
    text = model.chat([{"role": "user", "content": prompt}], max_tokens=64, temperature=0.0, seed=0).text.strip()
    # A model reply is only kept when it is one plain sentence; otherwise the procedural text stands.
    if 20 <= len(text) <= 300 and "\n" not in text and "<" not in text:
        return text
    return blueprint.description


def select_domains(taxonomy: Taxonomy, n: int, seed: int, model: ChatModel | None = None) -> list[dict[str, Any]]:
    """`n` domain records {name, category, blueprint, parent, round, seed}, in a deterministic order."""
    categories = sorted(taxonomy.categories)
    out: list[dict[str, Any]] = []
    taken: set[str] = set()
    index = 0
    round_ = 0
    while len(out) < n:
        for category in categories:
            if len(out) >= n:
                break
            seeds = taxonomy.categories[category].domains
            rng = item_rng(seed, "domains", category, round_)
            if round_ < len(seeds):
                blueprint, parent = seeds[round_], None
            else:
                base = seeds[rng.randrange(len(seeds))]
                blueprint, parent = _evolve(base, rng, taken), base.name
                if model is not None:
                    blueprint = blueprint.model_copy(
                        update={"description": _propose_description(model, category, blueprint)})
            taken.add(blueprint.name)
            out.append({"name": blueprint.name, "category": category, "parent": parent, "round": round_,
                        "seed": rng.randrange(2**31), "order": index,
                        "blueprint": blueprint.model_dump(mode="json")})
            index += 1
        round_ += 1
    return out
