"""Stage 3, tools: derive a domain's tools by operators (synth.operators), evolve them by mutations
(synth.mutations), and keep those that pass execution checks on the seeded world (synth.stages.toolcheck)."""

from __future__ import annotations

from envgym.llm import ChatModel
from envgym.world.spec import ToolSpec, WorldSpec
from envgym.world.state import WorldState, generate_state
from synth.mechanize import mechanize, owned_slots, roles
from synth.model import DomainModel, ToolRecord
from synth.mutations import mutate, signature
from synth.operators import Made, derive, unique_name
from synth.quality import tool_summary_problem
from synth.seeds import item_rng
from synth.stages.naming import propose_names
from synth.stages.toolcheck import validate_tools
from synth.stages.worlds import domain_entities


def tool_world(domain: DomainModel, tools: list[ToolSpec]) -> WorldSpec:
    """The domain's entities with its mechanisms installed, and `tools`."""
    mech = mechanize(domain, domain_entities(domain), set())
    return WorldSpec(name=domain.name, seed=domain.seed, entities=mech.entities, tools=tools, mechanisms=mech.uses)


def _superseded(made: Made, domain: DomainModel, owned: set[tuple[str, str]], names: set[str]) -> bool:
    """A procedural tool the mechanisms replace: it has a mechanism tool's name, or it writes what a mechanism owns
    (a status, a quantity, the rows a mechanism creates), which would break that mechanism's invariant."""
    effect = made.spec.effect
    if made.spec.name in names:
        return True
    if effect is None or made.spec.read_only:
        return False
    entity = domain.entity(made.entity).name
    if made.operator in ("create", "delete") and (entity, "*rows") in owned:
        return True
    return any((entity, f) in owned for f in effect.set)


def stage_tools(domain: DomainModel, master_seed: int, model: ChatModel | None = None) -> list[ToolRecord]:
    """Every derived and mutated tool of one domain, each with its checks; `valid` when all passed. With a model,
    each tool carries the name the model proposed where it passed the name filter (synth.stages.naming)."""
    rng = item_rng(master_seed, "tools", domain.name)
    mech = mechanize(domain, domain_entities(domain), set())
    owned = owned_slots(mech.uses, roles(domain))
    mech_names = {t.name for t, _ in mech.tools}
    made = []
    taken: set[str] = set(mech_names)
    for tool in derive(domain, rng):
        tool = mutate(tool, domain, rng)
        if _superseded(tool, domain, owned, mech_names):
            continue
        name = unique_name(tool.spec.name, taken)
        taken.add(name)
        tool.spec = tool.spec.model_copy(update={"name": name})
        made.append(tool)
    record = roles(domain)
    for spec, mechanism in mech.tools:
        m = Made(spec, f"mechanism:{mechanism}", record.record.name if record else domain.account, {})
        made.append(m)
    # Mechanism tools keep the catalogue's names: a transition's name is the state it reaches.
    procedural = [m for m in made if not m.operator.startswith("mechanism:")]
    proposed = iter(propose_names(model, domain, procedural) if model is not None else [None] * len(procedural))
    names = [None if m.operator.startswith("mechanism:") else next(proposed) for m in made]
    for m, n in zip(made, names, strict=True):
        if n is not None and not n.rejected_by:
            m.spec = m.spec.model_copy(update={"name": n.proposed})
    world = tool_world(domain, [m.spec for m in made])
    state: WorldState = generate_state(world)
    checks = validate_tools(world, state, domain, {m.spec.name: (m.entity, m.operator) for m in made})
    return [ToolRecord(domain=domain.name, spec=m.spec.model_dump(mode="json", exclude_defaults=True),
                       operator=m.operator, mutations=m.mutations, entity=m.entity, signature=signature(m.spec),
                       checks=checks[m.spec.name], valid=all(checks[m.spec.name].values()), order=i,
                       naming=names[i])
            for i, m in enumerate(made)]


def described(model: ChatModel, record: ToolRecord, label: str, others: list[str]) -> ToolRecord:
    """The tool with a model's rewording of the first sentence of its description (what it does), kept only if it
    passes `synth.quality.tool_summary_problem`; the sentences after it (what it returns, when it refuses, rate
    limits) are facts the agent needs and stay as they were."""
    description = str(record.spec.get("description", ""))
    first, dot, rest = description.partition(". ")
    prompt = ("Rewrite this one-sentence description of an API tool in different words, for a developer. Keep it "
              f"one sentence and keep the words '{label}'. Reply with the sentence only.\n\nTool: {record.spec['name']}"
              f"\nSentence: {first.rstrip('.')}.")
    reply = model.chat([{"role": "user", "content": prompt}], max_tokens=64, temperature=0.0, seed=0).text.strip()
    if tool_summary_problem(reply, label, others) is not None:
        return record
    text = reply if reply.endswith(".") else reply + "."
    return record.model_copy(update={"spec": {**record.spec, "description": f"{text} {rest}".strip() if dot else text}})
