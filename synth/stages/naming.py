"""Model-named tools (issue 15, part 5): with a model, every tool of a domain is offered the name the model proposes
for it, and carries it when `synth.quality.tool_name_problem` finds nothing wrong; otherwise it keeps its
procedural name. Names are settled before the tools are checked, so programs, tasks, rules, prompts and the world
file only ever see the final name."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from envgym.llm import ChatModel
from envgym.world.spec import ToolSpec
from synth.model import DomainModel, ToolName, ToolRecord
from synth.operators import Made
from synth.quality import entities_named, tool_name_problem

# The meaning of each writing operator; every other operator only reads (its tools are labelled read_only).
WRITE_KINDS = {"create": "create", "update": "update", "delete": "delete", "transition": "transition",
               "bulk_transition": "transition"}
MAX_KEPT_REPLY = 120


def tool_kind(made: Made) -> str:
    """read, create, update, delete or transition: what a name for this tool must keep meaning."""
    return "read" if made.spec.read_only else WRITE_KINDS[made.operator]


def entity_forms(domain: DomainModel) -> dict[str, str]:
    """Every entity's name and plural -> the entity."""
    return {form: e.name for e in domain.entities for form in (e.name, e.plural)}


def own_entities(domain: DomainModel, made: Made) -> set[str]:
    """The tool's entity and those its procedural name mentions (a many-to-many listing names both sides)."""
    return {made.entity, *entities_named(made.spec.name, entity_forms(domain))}


def own_verbs(domain: DomainModel, made: Made) -> tuple[str, ...]:
    """The workflow verbs a status change is procedurally named by ("cancel" for cancel_booking)."""
    if tool_kind(made) != "transition":
        return ()
    return tuple(t.verb for t in domain.entity(made.entity).workflow if made.spec.name.startswith(t.verb + "_"))


def target_status(made: Made) -> str:
    """The status a status change sets ("" for other tools)."""
    effect = made.spec.effect
    return str(effect.set.get("status", "")) if effect is not None and tool_kind(made) == "transition" else ""


def naming_prompt(spec: ToolSpec) -> str:
    """What the model is asked: a function name for the tool's purpose (the first sentence of its description), not
    its procedural name, which a model would copy. Asked for a Python function name because SmolLM2-135M then
    answers with an identifier; asked for a "snake_case name" it echoed the request's own words."""
    return (f"Write the Python function name for this API call: {spec.description.partition('. ')[0].rstrip('.')}. "
            "Reply with the function name only.")


# A model asked for a function name often answers with the function's first line, fenced or not.
DEF_LINE = re.compile(r"^\s*(?:```[a-z]*\s*)?def\s+([^\s(]+)\s*\(")


def proposed_name(reply: str) -> str:
    """The name a reply proposes: the name a `def` line defines, else the reply without quotes around it."""
    found = DEF_LINE.match(reply)
    return found.group(1) if found else reply.strip().strip("`'\"").strip()


def propose_names(model: ChatModel, domain: DomainModel, made: list[Made]) -> list[ToolName]:
    """One proposal per tool, in tool order. A proposal must not take a name another tool holds or could fall back to
    (the names already settled, and the procedural names of the tools still to come)."""
    forms = entity_forms(domain)
    settled: list[str] = []
    out = []
    for i, m in enumerate(made):
        reply = model.chat([{"role": "user", "content": naming_prompt(m.spec)}], max_tokens=24, temperature=0.0,
                           seed=0).text
        proposed = proposed_name(reply)
        taken = {*settled, *(n.spec.name for n in made[i + 1:])}
        why = tool_name_problem(proposed, tool_kind(m), own_entities(domain, m), forms, taken, own_verbs(domain, m),
                                target_status(m))
        out.append(ToolName(procedural=m.spec.name, proposed=proposed[:MAX_KEPT_REPLY], reply=reply[:MAX_KEPT_REPLY],
                            rejected_by=why or ""))
        settled.append(m.spec.name if why else proposed)
    return out


def name_counts(tools: list[ToolRecord]) -> dict[str, Any] | None:
    """How the model's tool names fared: proposed, kept (renamed, or the same as the procedural name) and rejected by
    reason (without its detail in parentheses); None when no model named the tools."""
    named = [t.naming for t in tools if t.naming is not None]
    if not named:
        return None
    kept = [n for n in named if not n.rejected_by]
    why = Counter(n.rejected_by.split(" (")[0] for n in named if n.rejected_by)
    return {"proposed": len(named), "kept": len(kept), "renamed": sum(n.proposed != n.procedural for n in kept),
            "rejected": len(named) - len(kept), "rejected_by": dict(sorted(why.items()))}

