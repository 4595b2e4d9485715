"""Tool operators: tools derived from a domain's data model by operators, then evolved by mutations (synth.mutations).

Operators: authenticate (facts only the user holds -> account id), get (with joins along references), list along
a one-to-many relation, list through a many-to-many link, multi-predicate search with sort and pages, aggregates
(count, sum, min, max, group by), create with reference checks and limits, update with preconditions, workflow
transitions guarded by the state machine, delete, and bulk transitions. Every parameter schema is closed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

from envgym.world.spec import Effect, Filter, Precondition, ToolSpec
from synth.lexicon import a, past, plural, words
from synth.model import DomainModel, EntityModel, FieldModel

ID = {"type": "string", "minLength": 1}
SORTABLE = ("money", "quantity", "duration", "date", "time")
SETTABLE = ("money", "quantity", "duration", "date", "time", "enum")


def schema(props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def param(f: FieldModel, limit: float | None = None, description: str = "") -> dict[str, Any]:
    """The JSON Schema of an argument holding a value of field `f`."""
    out: dict[str, Any]
    if f.kind in ("money", "quantity", "duration"):
        out = {"type": "number" if f.kind == "money" else "integer", "minimum": f.lo,
               "maximum": f.hi if limit is None else limit}
        if f.kind != "money":
            out = {**out, "minimum": int(f.lo), "maximum": int(out["maximum"])}
    elif f.kind in ("enum", "state") or f.kind == "list":
        out = {"type": "string", "enum": list(f.choices)}
    elif f.kind in ("id", "ref"):
        out = dict(ID)
    else:
        out = {"type": "string", "minLength": 1}
    unit = f" in {f.unit}" if f.unit else (" (YYYY-MM-DD)" if f.kind == "date" else "")
    return {**out, "description": description or f"{words(f.name)}{unit}"}


class Made:
    """A tool made by an operator, before mutations: its spec and how its parameters map to field kinds."""

    def __init__(self, spec: ToolSpec, operator: str, entity: str, kinds: dict[str, str]):
        self.spec, self.operator, self.entity, self.kinds = spec, operator, entity, kinds
        self.mutations: list[str] = []


def _tool(name: str, description: str, props: dict[str, Any], required: list[str], effect: Effect,
          read: bool) -> ToolSpec:
    labels: list[Any] = ["read_only"] if read else []
    return ToolSpec(name=name, description=description, parameters=schema(props, required), labels=labels,
                    effect=effect)


def authenticate(d: DomainModel, rng: random.Random) -> Made:
    acct = d.entity(d.account)
    f1, f2 = (acct.field(n) for n in d.auth)
    name = rng.choice([f"verify_{acct.name}", f"authenticate_{acct.name}",
                       f"find_{acct.name}_by_{f1.name}_and_{f2.name}"])
    spec = _tool(name, f"Verify who {a(acct.label)} is from their {words(f1.name)} and {words(f2.name)}; returns "
                       f"their {acct.label} id. Call this before reading or changing anything of theirs.",
                 {f1.name: param(f1), f2.name: param(f2)}, [f1.name, f2.name],
                 Effect(op="get", entity=acct.plural, match={f1.name: f"${f1.name}", f2.name: f"${f2.name}"},
                        returns=acct.key, not_found_error=f"no {acct.label} matches that {words(f1.name)} and "
                                                          f"{words(f2.name)}"), True)
    return Made(spec, "authenticate", acct.name, {f1.name: f1.kind, f2.name: f2.kind})


def get(e: EntityModel, rng: random.Random) -> Made:
    refs = [f.name for f in e.of_kind("ref")]
    joined = sorted(rng.sample(refs, rng.randint(1, len(refs)))) if refs and rng.random() < 0.5 else []
    extra = f", with its {' and '.join(words(r.removesuffix('_id')) for r in joined)}" if joined else ""
    spec = _tool(f"get_{e.name}" + ("_details" if joined else ""), f"Get {a(e.label)} by id{extra}.",
                 {e.key: param(FieldModel(name=e.key, kind="id"), description=f"the {e.label} id")}, [e.key],
                 Effect(op="get", entity=e.plural, key_arg=e.key, expand=joined,
                        not_found_error=f"no {e.label} with id {{{e.key}}}"), True)
    return Made(spec, "join" if joined else "get", e.name, {e.key: "id"})


def _filters(e: EntityModel, rng: random.Random, most: int) -> tuple[dict[str, Any], list[Filter], dict[str, str]]:
    """Optional predicates over an entity: equality on enums, ranges on numbers and dates, text containment."""
    props: dict[str, Any] = {}
    filters: list[Filter] = []
    kinds: dict[str, str] = {}
    fields = [f for f in e.fields if f.kind in ("enum", "state", "list", *SORTABLE, "text")]
    for f in rng.sample(fields, min(most, len(fields))):
        if f.kind in ("enum", "state"):
            props[f.name], op, arg = param(f), "eq", f.name
        elif f.kind == "list":
            arg, op = f"has_{f.name.removesuffix('s')}", "contains"
            props[arg] = param(f, description=f"only {e.label} records with this {words(f.name)} entry")
        elif f.kind == "text":
            arg, op = f"{f.name}_contains", "contains"
            props[arg] = {"type": "string", "minLength": 1, "description": f"text the {words(f.name)} contains"}
        else:
            op = rng.choice(["ge", "le"])
            arg = f"{'min' if op == 'ge' else 'max'}_{f.name}" if f.kind not in ("date", "time") else \
                f"{f.name}_{'from' if op == 'ge' else 'until'}"
            props[arg] = param(f, description=f"{'at least' if op == 'ge' else 'at most'} this {words(f.name)}")
        filters.append(Filter(field=f.name, op=op, arg=f"${arg}"))
        kinds[arg] = f"{f.kind}:{op}"
    return props, filters, kinds


def _owner_scope(d: DomainModel, e: EntityModel) -> tuple[dict[str, Any], dict[str, str], dict[str, Any]]:
    acct = d.entity(d.account)
    return ({acct.key: param(FieldModel(name=acct.key, kind="ref"), description=f"the {acct.label} id")},
            {acct.key: "ref"}, {acct.key: f"${acct.key}"})


def _scoped_filters(d: DomainModel, e: EntityModel, rng: random.Random, most: int) -> tuple[
        dict[str, Any], list[Filter], dict[str, str], list[str], dict[str, Any]]:
    """Optional filters, plus the account id as a required argument when the entity's records are owned."""
    props, filters, kinds = _filters(e, rng, most)
    if not e.owner:
        return props, filters, kinds, [], {}
    scope, skinds, match = _owner_scope(d, e)
    return {**scope, **props}, filters, {**skinds, **kinds}, list(scope), match


def search(d: DomainModel, e: EntityModel, rng: random.Random) -> Made:
    props, filters, kinds, required, match = _scoped_filters(d, e, rng, rng.randint(1, 4))
    sortable = [f.name for f in e.fields if f.kind in SORTABLE]
    sort_by = None
    if sortable and rng.random() < 0.6:
        props["sort_by"] = {"type": "string", "enum": sortable, "description": "field to sort by"}
        props["order"] = {"type": "string", "enum": ["asc", "desc"], "description": "sort order"}
        kinds.update({"sort_by": "sort", "order": "order"})
        sort_by = "$sort_by"
    limit = rng.choice([10, 20, 50])
    page = None
    if rng.random() < 0.4:
        props["page"] = {"type": "integer", "minimum": 1, "maximum": 50, "description": f"page ({limit} per page)"}
        kinds["page"] = "page"
        page = "page"
    owner = f" of {a(d.entity(d.account).label)}" if e.owner else ""
    verb = "list" if e.owner else "search"
    name = f"{verb}_{e.plural}" if e.owner or filters else f"browse_{e.plural}"
    spec = _tool(name, f"Find the {words(e.plural)}{owner} matching every filter given "
                       f"({', '.join(words(k) for k in kinds if k not in ('sort_by', 'order', 'page'))}); "
                       f"at most {limit} per call.", props, required,
                 Effect(op="list", entity=e.plural, match=match, filters=filters, sort_by=sort_by,
                        order="$order" if sort_by else "asc", page_arg=page, limit=limit), True)
    return Made(spec, "search", e.name, kinds)


def aggregate(d: DomainModel, e: EntityModel, rng: random.Random) -> Made | None:
    numeric = [f for f in e.fields if f.kind in ("money", "quantity", "duration")]
    how = rng.choice(["count", *(["sum", "min", "max"] if numeric else [])])
    field = rng.choice(numeric) if how != "count" else None
    groups = [f.name for f in e.fields if f.kind in ("enum", "state")]
    group = rng.choice(groups) if groups and rng.random() < 0.3 else None
    props, filters, kinds, required, match = _scoped_filters(d, e, rng, rng.randint(0, 2))
    if match:
        filters = [Filter(field=k, op="eq", arg=v) for k, v in match.items()] + filters
    word = {"count": "count", "sum": "total", "min": "lowest", "max": "highest"}[how]
    subject = f"{word}_{field.name}" if field else "count"
    name = f"{subject}_of_{e.plural}" + (f"_by_{group}" if group else "")
    what = {"count": "how many", "sum": f"the total {words(field.name) if field else ''}",
            "min": f"the lowest {words(field.name) if field else ''} (and which {e.label} has it)",
            "max": f"the highest {words(field.name) if field else ''} (and which {e.label} has it)"}[how]
    per = f", per {words(group)}" if group else ""
    spec = _tool(name, f"Compute {what} over the {words(e.plural)} matching the filters{per}.", props, required,
                 Effect(op="aggregate", entity=e.plural, filters=filters, aggregate=how,
                        aggregate_field=field.name if field else None, group_by=group), True)
    return Made(spec, f"aggregate_{how}" + ("_grouped" if group else ""), e.name, kinds)


def children(e: EntityModel, parent: EntityModel) -> Made:
    """List along a one-to-many relation from a parent entity (a join on the reference)."""
    spec = _tool(f"list_{e.plurals_of(parent)}", f"List the {words(e.plural)} of {a(parent.label)}.",
                 {parent.key: param(FieldModel(name=parent.key, kind="ref"), description=f"the {parent.label} id")},
                 [parent.key], Effect(op="list", entity=e.plural, match={parent.key: f"${parent.key}"}), True)
    return Made(spec, "relation_one_to_many", e.name, {parent.key: "ref"})


def through(link: EntityModel, left: EntityModel, right: EntityModel) -> Made:
    """List the right side of a many-to-many relation for one left record, through the link entity."""
    spec = _tool(f"list_{right.plural}_for_{left.name}",
                 f"List the {words(right.plural)} linked to {a(left.label)} (each {words(link.name)} with its "
                 f"{right.label} joined in).",
                 {left.key: param(FieldModel(name=left.key, kind="ref"), description=f"the {left.label} id")},
                 [left.key], Effect(op="list", entity=link.plural, match={left.key: f"${left.key}"},
                                    expand=[right.key]), True)
    return Made(spec, "relation_many_to_many", link.name, {left.key: "ref"})


def _limit(d: DomainModel, e: EntityModel, f: FieldModel) -> float | None:
    return next((x.value for x in d.limits if x.entity == e.name and x.field == f.name), None)


def create(d: DomainModel, e: EntityModel) -> Made:
    props: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    values: dict[str, Any] = {}
    for f in e.fields:
        if f.kind == "ref":
            props[f.name], kinds[f.name] = param(f, description=f"the {words(f.ref or '')} id"), "ref"
        elif f.kind in SETTABLE:
            props[f.name], kinds[f.name] = param(f, _limit(d, e, f)), f.kind
        else:
            continue
        values[f.name] = f"${f.name}"
    for f in e.of_kind("state"):
        values[f.name] = f.choices[0]
    for f in e.of_kind("currency"):
        values[f.name] = f.unit
    verb = "add" if not e.workflow else "open"
    spec = _tool(f"{verb}_{e.name}", f"Create {a(e.label)}" + (f" (it starts as {words(e.field('status').choices[0])})"
                                                                   if e.of_kind("state") else "")
                 + "; returns it with its new id.", props, list(props),
                 Effect(op="create", entity=e.plural, set=values, check_refs=True), False)
    return Made(spec, "create", e.name, kinds)


def _open_states(e: EntityModel) -> list[str]:
    targets = {t.target for t in e.workflow}
    sources = {s for t in e.workflow for s in t.source}
    return sorted(sources) if sources else [c for c in e.field("status").choices if c not in targets]


def update(d: DomainModel, e: EntityModel, f: FieldModel) -> Made:
    pre = []
    if e.workflow:
        allowed = _open_states(e)
        pre = [Precondition(field="status", op="in", value=allowed,
                            error=f"{e.label} {{{e.key}}} is {{status}}; only {' or '.join(map(words, allowed))} "
                                  f"ones can be changed")]
    limit = _limit(d, e, f)
    note = f" (at most {limit:g})" if limit is not None else ""
    spec = _tool(f"change_{e.name}_{f.name}", f"Change the {words(f.name)} of {a(e.label)}{note}.",
                 {e.key: param(FieldModel(name=e.key, kind="id"), description=f"the {e.label} id"),
                  f.name: param(f, limit)}, [e.key, f.name],
                 Effect(op="update", entity=e.plural, key_arg=e.key, set={f.name: f"${f.name}"}, preconditions=pre,
                        not_found_error=f"no {e.label} with id {{{e.key}}}"), False)
    return Made(spec, "update", e.name, {e.key: "id", f.name: f.kind})


def transition(e: EntityModel, verb: str, source: list[str], target: str) -> Made:
    states = " or ".join(map(words, source))
    spec = _tool(f"{verb}_{e.name}", f"Mark {a(e.label)} as {words(target)}; only {states} ones can be "
                                     f"{past(verb)}.",
                 {e.key: param(FieldModel(name=e.key, kind="id"), description=f"the {e.label} id")}, [e.key],
                 Effect(op="update", entity=e.plural, key_arg=e.key, set={"status": target},
                        preconditions=[Precondition(field="status", op="in", value=source,
                                                    error=f"{e.label} {{{e.key}}} is {{status}}; only {states} "
                                                          f"ones can be {past(verb)}")],
                        not_found_error=f"no {e.label} with id {{{e.key}}}"), False)
    return Made(spec, "transition", e.name, {e.key: "id"})


def bulk(d: DomainModel, e: EntityModel, verb: str, source: list[str], target: str) -> Made:
    scope, kinds, match = _owner_scope(d, e)
    status = e.field("status")
    spec = _tool(f"{verb}_all_{e.plural}", f"Mark every {e.label} of {a(d.entity(d.account).label)} that has the "
                                           f"given status as {words(target)} (only {' or '.join(map(words, source))} "
                                           f"ones are changed); returns the ids changed.",
                 {**scope, "status": param(status)}, [*scope, "status"],
                 Effect(op="update_many", entity=e.plural,
                        filters=[Filter(field=k, op="eq", arg=v) for k, v in match.items()]
                        + [Filter(field="status", op="eq", arg="$status")], set={"status": target},
                        preconditions=[Precondition(field="status", op="in", value=source, error="")]), False)
    return Made(spec, "bulk_transition", e.name, {**kinds, "status": "state"})


def delete(e: EntityModel) -> Made:
    spec = _tool(f"remove_{e.name}", f"Delete {a(e.label)} for good.",
                 {e.key: param(FieldModel(name=e.key, kind="id"), description=f"the {e.label} id")}, [e.key],
                 Effect(op="delete", entity=e.plural, key_arg=e.key,
                        not_found_error=f"no {e.label} with id {{{e.key}}}"), False)
    return Made(spec, "delete", e.name, {e.key: "id"})


def derive(d: DomainModel, rng: random.Random) -> Iterator[Made]:
    """Every tool the operators derive from the domain, in a fixed order."""
    yield authenticate(d, rng)
    by_name = {e.name: e for e in d.entities}
    for e in d.entities:
        if e.name == d.account:
            continue
        yield get(e, rng)
        yield search(d, e, rng)
        made = aggregate(d, e, rng)
        if made is not None:
            yield made
        for f in e.of_kind("ref"):
            parent = by_name[f.ref or ""]
            if f.ref != d.account and not e.link and not parent.catalog:
                yield children(e, parent)
        if e.link:
            left, right = (by_name[f.ref or ""] for f in e.of_kind("ref")[1:3])
            yield through(e, left, right)
        if e.owner is None:
            continue
        if not e.link and rng.random() < 0.8:
            yield create(d, e)
        settable = [f for f in e.fields if f.kind in SETTABLE and f.kind != "state"]
        for f in rng.sample(settable, min(len(settable), rng.randint(1, 2))):
            yield update(d, e, f)
        for t in e.workflow:
            yield transition(e, t.verb, t.source, t.target)
        if e.workflow and rng.random() < 0.5:
            t = rng.choice(e.workflow)
            yield bulk(d, e, t.verb, t.source, t.target)
        if not e.workflow:
            yield delete(e)


def unique_name(name: str, taken: set[str]) -> str:
    out, n = name, 2
    while out in taken:
        out, n = f"{name}_{n}", n + 1
    return out


__all__ = ["Made", "derive", "plural", "unique_name"]
