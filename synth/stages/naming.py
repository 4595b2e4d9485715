"""Model-named tools (issue 15, part 5): with a model, every tool of a domain is offered the name the model proposes
for it, and carries it when `synth.quality.tool_name_problem` finds nothing wrong; otherwise it keeps its
procedural name. Names are settled before the tools are checked, so programs, tasks, rules, prompts and the world
file only ever see the final name."""

from __future__ import annotations

from envgym.llm import ChatModel
from envgym.world.spec import ToolSpec
from synth.model import DomainModel, ToolName
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


def naming_prompt(domain: DomainModel, spec: ToolSpec, entity: str) -> str:
    """What the model is asked: the tool's purpose (the first sentence of its description), its records, whether it
    writes, its arguments; not its procedural name, which a model would copy."""
    kind = "only reads records" if spec.read_only else "changes records"
    return ("Name this API tool. Reply with the name only, in lowercase snake_case: a verb first, then the records "
            f"it works on.\n\nWhat it does: {spec.description.partition('. ')[0].rstrip('.')}.\nRecords: "
            f"{domain.entity(entity).label}\nIt {kind}.\nArguments: "
            f"{', '.join(spec.parameters.get('properties', {})) or 'none'}")


def propose_names(model: ChatModel, domain: DomainModel, made: list[Made]) -> list[ToolName]:
    """One proposal per tool, in tool order. A proposal must not take a name another tool holds or could fall back to
    (the names already settled, and the procedural names of the tools still to come)."""
    forms = entity_forms(domain)
    settled: list[str] = []
    out = []
    for i, m in enumerate(made):
        reply = model.chat([{"role": "user", "content": naming_prompt(domain, m.spec, m.entity)}], max_tokens=16, temperature=0.0,
                           seed=0).text
        proposed = reply.strip().strip("`'\"").strip()
        taken = {*settled, *(n.spec.name for n in made[i + 1:])}
        why = tool_name_problem(proposed, tool_kind(m), own_entities(domain, m), forms, taken, own_verbs(domain, m))
        out.append(ToolName(procedural=m.spec.name, proposed=proposed[:MAX_KEPT_REPLY], rejected_by=why or ""))
        settled.append(m.spec.name if why else proposed)
    return out
