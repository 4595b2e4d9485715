"""Stage 2, tools: per domain, typed tools in the world format from CRUD templates over its entities.

Each tool has a role (what it does, independent of the domain's nouns) so later stages can compose programs:
lookups by id, a lookup by email, search and list tools, and four writes (create, cancel, update quantity, set
measure, set status). Every parameter schema is closed (`additionalProperties: false`) with enums and bounds.
"""

from __future__ import annotations

from typing import Any

from envgym.world.spec import Effect, EntitySpec, Precondition, ToolSpec
from synth.taxonomy import DomainBlueprint
from synth.worlds import CANCELLED

READ_ROLES = ("find_actor", "get_actor", "get_asset", "search_assets", "list_records", "get_record")
WRITE_ROLES = ("create_record", "cancel_record", "update_qty", "set_measure", "set_status")


def _schema(props: dict[str, dict[str, Any]], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required, "additionalProperties": False}


def _words(name: str) -> str:
    return name.replace("_", " ")


def synthesize_tools(bp: DomainBlueprint) -> dict[str, ToolSpec]:
    """role -> ToolSpec for one domain (names are unique within the domain)."""
    a, s, r = bp.actor, bp.asset, bp.record
    aid, sid, rid = f"{a.noun}_id", f"{s.noun}_id", f"{r.noun}_id"
    ro: list[Any] = ["read_only"]
    idp = {"type": "string", "minLength": 1}
    qty = {"type": "integer", "minimum": r.qty_min, "maximum": r.qty_max,
           "description": f"{_words(r.qty)} ({r.qty_min}-{r.qty_max})"}
    tools: dict[str, ToolSpec] = {
        "find_actor": ToolSpec(
            name=f"find_{a.noun}_id_by_email",
            description=f"Find a {_words(a.noun)}'s id from their email address (use it to identify them). "
                        f"Error if no {_words(a.noun)} has that email.",
            labels=ro, parameters=_schema({"email": {"type": "string", "minLength": 3}}, ["email"]),
            effect=Effect(op="get", entity=a.entity, match={"email": "$email"}, returns=aid,
                          not_found_error=f"no {_words(a.noun)} with email {{email}}")),
        "get_actor": ToolSpec(
            name=f"get_{a.noun}_details",
            description=f"Get a {_words(a.noun)}'s profile (name, email, phone, tier) by id.",
            labels=ro, parameters=_schema({aid: idp}, [aid]),
            effect=Effect(op="get", entity=a.entity, key_arg=aid,
                          not_found_error=f"no {_words(a.noun)} with id {{{aid}}}")),
        "get_asset": ToolSpec(
            name=f"get_{s.noun}_details",
            description=f"Get a {_words(s.noun)} by id: kind, name, location, status and {_words(s.measure)} "
                        f"(in {s.unit}).",
            labels=ro, parameters=_schema({sid: idp}, [sid]),
            effect=Effect(op="get", entity=s.entity, key_arg=sid,
                          not_found_error=f"no {_words(s.noun)} with id {{{sid}}}")),
        "search_assets": ToolSpec(
            name=f"search_{s.entity}",
            description=f"Search {_words(s.entity)} by words in their name, kind or location; returns up to 20 "
                        f"matches with id, name, kind and status.",
            labels=ro, parameters=_schema({"query": {"type": "string", "minLength": 1}}, ["query"]),
            effect=Effect(op="search", entity=s.entity, query_arg="query", search_fields=["name", "kind", "location"],
                          returns=[sid, "name", "kind", "status"], limit=20)),
        "list_records": ToolSpec(
            name=f"list_{a.noun}_{r.entity}",
            description=f"List a {_words(a.noun)}'s {_words(r.entity)}, optionally only those with a status.",
            labels=ro, parameters=_schema(
                {aid: idp, "status": {"type": "string", "enum": [*r.open, CANCELLED]}}, [aid]),
            effect=Effect(op="list", entity=r.entity, match={aid: f"${aid}", "status": "$status"},
                          returns=[rid, sid, "status", r.qty])),
        "get_record": ToolSpec(
            name=f"get_{r.noun}_details",
            description=f"Get a {_words(r.noun)} by id: who it belongs to, the {_words(s.noun)}, status and "
                        f"{_words(r.qty)}.",
            labels=ro, parameters=_schema({rid: idp}, [rid]),
            effect=Effect(op="get", entity=r.entity, key_arg=rid,
                          not_found_error=f"no {_words(r.noun)} with id {{{rid}}}")),
        "create_record": ToolSpec(
            name=f"{r.create_verb}_{r.noun}",
            description=f"Create a new {_words(r.noun)} for a {_words(a.noun)} on a {_words(s.noun)}; it starts "
                        f"as '{r.open[0]}'. Returns the new {_words(r.noun)} with its id.",
            parameters=_schema({aid: idp, sid: idp, r.qty: qty}, [aid, sid, r.qty]),
            effect=Effect(op="create", entity=r.entity,
                          set={aid: f"${aid}", sid: f"${sid}", "status": r.open[0], r.qty: f"${r.qty}",
                               "cancel_reason": ""})),
        "cancel_record": ToolSpec(
            name=f"{r.cancel_verb}_{r.noun}",
            description=f"{r.cancel_verb.capitalize()} a {_words(r.noun)} that is {' or '.join(r.open)}, "
                        f"with a reason. Error if it is already {CANCELLED}.",
            labels=["destructive"],
            parameters=_schema({rid: idp, "reason": {"type": "string", "enum": list(r.reasons)}}, [rid, "reason"]),
            effect=Effect(op="update", entity=r.entity, key_arg=rid,
                          set={"status": CANCELLED, "cancel_reason": "$reason"},
                          preconditions=[Precondition(field="status", op="in", value=list(r.open),
                                                      error=f"{_words(r.noun)} {{{rid}}} is {{status}}; only "
                                                            f"{' or '.join(r.open)} ones can be changed")],
                          not_found_error=f"no {_words(r.noun)} with id {{{rid}}}")),
        "update_qty": ToolSpec(
            name=f"update_{r.noun}_{r.qty}",
            description=f"Change the {_words(r.qty)} of a {_words(r.noun)} that is {' or '.join(r.open)}.",
            parameters=_schema({rid: idp, r.qty: qty}, [rid, r.qty]),
            effect=Effect(op="update", entity=r.entity, key_arg=rid, set={r.qty: f"${r.qty}"},
                          preconditions=[Precondition(field="status", op="in", value=list(r.open),
                                                      error=f"{_words(r.noun)} {{{rid}}} is {{status}}; only "
                                                            f"{' or '.join(r.open)} ones can be changed")],
                          not_found_error=f"no {_words(r.noun)} with id {{{rid}}}")),
        "set_measure": ToolSpec(
            name=f"set_{s.noun}_{s.measure}",
            description=f"Set the {_words(s.measure)} of a {_words(s.noun)} (in {s.unit}, {s.min:g}-{s.max:g}). "
                        f"Not allowed while it is {s.states[-1]}.",
            parameters=_schema({sid: idp, "value": {"type": "number", "minimum": s.min, "maximum": s.max}},
                               [sid, "value"]),
            effect=Effect(op="update", entity=s.entity, key_arg=sid, set={s.measure: "$value"},
                          preconditions=[Precondition(field="status", op="ne", value=s.states[-1],
                                                      error=f"{_words(s.noun)} {{{sid}}} is {s.states[-1]}; "
                                                            f"its {_words(s.measure)} cannot be changed")],
                          not_found_error=f"no {_words(s.noun)} with id {{{sid}}}")),
        "set_status": ToolSpec(
            name=f"set_{s.noun}_status",
            description=f"Set a {_words(s.noun)}'s status to one of: {', '.join(s.states)}.",
            parameters=_schema({sid: idp, "status": {"type": "string", "enum": list(s.states)}}, [sid, "status"]),
            effect=Effect(op="update", entity=s.entity, key_arg=sid, set={"status": "$status"},
                          not_found_error=f"no {_words(s.noun)} with id {{{sid}}}")),
    }
    return tools


def key_fields(entities: dict[str, EntitySpec]) -> set[str]:
    """The id fields of a world's entities (the values that flow between tools)."""
    return {e.key for e in entities.values()}


def produces(tool: ToolSpec, entities: dict[str, EntitySpec]) -> set[str]:
    """Id fields whose values this tool's result reveals: the sources of data-dependency edges."""
    if tool.effect is None:
        return set()
    returns = tool.effect.returns
    if returns is None:
        revealed = set(entities[tool.effect.entity].fields)
    else:
        revealed = {returns} if isinstance(returns, str) else set(returns)
    return revealed & key_fields(entities)


def consumes(tool: ToolSpec, entities: dict[str, EntitySpec]) -> set[str]:
    """Id fields this tool needs as required arguments: the targets of data-dependency edges."""
    return set(tool.parameters.get("required", [])) & key_fields(entities)
