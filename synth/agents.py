"""Stage 4, agents: a system prompt, a tau-style policy and a subset of 5-8 tools chosen along data dependencies.

The subset grows from seeded write tools: each write pulls in tools that produce the ids it needs (its
producers, transitively), so every write in an agent's subset is reachable from what a user can say (an email,
a name). Persona knobs (tone, verbosity) are drawn from the item's RNG.
"""

from __future__ import annotations

import random
from typing import Any

from envgym.world.spec import EntitySpec, ToolSpec
from synth.taxonomy import DomainBlueprint
from synth.toolgen import WRITE_ROLES, consumes, produces

TONES = ["formal", "friendly", "concise", "patient"]
MIN_TOOLS, MAX_TOOLS = 5, 8
# Producers a user can start from without knowing any id come first.
_ENTRY_ROLES = ("find_actor", "search_assets")


def _closure(role: str, tools: dict[str, ToolSpec], entities: dict[str, EntitySpec], chosen: list[str]) -> list[str]:
    """`role` plus, for each id it needs, its best producer (entry tools first, never a write), recursively."""
    added = [role]
    for need in sorted(consumes(tools[role], entities)):
        producers = [r for r in tools if r != role and r not in WRITE_ROLES and need in produces(tools[r], entities)]
        producers.sort(key=lambda r: (r not in _ENTRY_ROLES, need in consumes(tools[r], entities),
                                      len(consumes(tools[r], entities)), r))
        if producers and producers[0] not in [*chosen, *added]:
            added += [r for r in _closure(producers[0], tools, entities, [*chosen, *added]) if r not in added]
    return added


def choose_tools(tools: dict[str, ToolSpec], entities: dict[str, EntitySpec], rng: random.Random) -> list[str]:
    """Roles of a 5-8 tool subset with at least two writes, every write's inputs produced inside the subset."""
    target = rng.randint(MIN_TOOLS + 1, MAX_TOOLS)
    writes = [r for r in WRITE_ROLES if r in tools]
    rng.shuffle(writes)
    chosen: list[str] = []
    for write in writes:
        grown = chosen + [r for r in _closure(write, tools, entities, chosen) if r not in chosen]
        if len(grown) > MAX_TOOLS or (len(chosen) >= target and sum(r in WRITE_ROLES for r in chosen) >= 2):
            continue
        chosen = grown
    reads = [r for r in tools if r not in chosen and r not in WRITE_ROLES]
    rng.shuffle(reads)
    while len(chosen) < max(target, MIN_TOOLS) and reads:
        chosen.append(reads.pop())
    return sorted(chosen, key=list(tools).index)


def agent_prompts(bp: DomainBlueprint, tools: list[ToolSpec], tone: str) -> tuple[str, str]:
    """(system prompt, policy) for an agent of this domain."""
    a, s, r = bp.actor, bp.asset, bp.record
    words = {"formal": "courteous and precise", "friendly": "warm and helpful", "concise": "brief and to the point",
             "patient": "patient and thorough"}[tone]
    system = (f"You are the support assistant for {bp.description[0].lower()}{bp.description[1:].rstrip('.')}. "
              f"Be {words}. Help {a.entity.replace('_', ' ')} with their {r.entity.replace('_', ' ')} and "
              f"{s.entity.replace('_', ' ')} using only the tools below, and follow the policy.")
    writes = [t.name for t in tools if not t.read_only]
    policy = "\n".join([
        f"- Identify the {a.noun.replace('_', ' ')} before changing anything that belongs to them "
        "(look them up by email).",
        f"- Only act on {r.entity.replace('_', ' ')} that belong to the identified {a.noun.replace('_', ' ')}.",
        f"- Before a change ({', '.join(writes)}), state what you will do and get the user's explicit yes.",
        "- Make one change per confirmation; never guess ids: look them up.",
        "- Do not make up information; report values exactly as the tools return them.",
        "- If a request is outside what the tools can do, say so plainly.",
    ])
    return system, policy


def make_agent(bp: DomainBlueprint, tools: dict[str, ToolSpec], entities: dict[str, EntitySpec],
               rng: random.Random) -> dict[str, Any]:
    """An agent record: roles and names of its tools, persona, system prompt and policy."""
    roles = choose_tools(tools, entities, rng)
    tone = rng.choice(TONES)
    system, policy = agent_prompts(bp, [tools[r] for r in roles], tone)
    return {"roles": roles, "tools": [tools[r].name for r in roles], "persona": {"tone": tone},
            "system_prompt": system, "policy": policy}
