"""Tool mutations (K2-style evolution of a derived tool) and the masked signature used to count distinct tools.

A mutation returns a new tool or None when it does not apply: add an optional filter, nest the filters (or the
identity facts) in an object argument, return only some fields, add a required field, or add a failure mode
(permission: the record must belong to the account named in the call; rate limit: after a few calls the next one
is refused; transient: a share of the calls fails. The env plays the last two deterministically by the episode's
seed, `envgym.world.tools.FaultLedger`, and a retry of the failed call goes through).
"""

from __future__ import annotations

import json
import random
from typing import Any

from envgym.world.spec import Filter, Precondition, ToolFaults, ToolSpec
from synth.lexicon import words
from synth.model import DomainModel, FieldModel
from synth.operators import Made, _filters, param

REASONS = ["customer request", "duplicate", "entered by mistake", "no longer needed", "schedule change",
           "price change", "moved elsewhere"]


def _copy(made: Made, name: str, spec_update: dict[str, Any], kinds: dict[str, str]) -> Made:
    out = Made(made.spec.model_copy(update=spec_update), made.operator, made.entity, kinds)
    out.mutations = [*made.mutations, name]
    return out


def optional_filter(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    effect = made.spec.effect
    if effect is None or effect.op not in ("list", "aggregate") or made.operator.startswith("relation"):
        return None
    props, filters, kinds = _filters(d.entity(made.entity), rng, 1)
    if not filters or set(props) & set(made.spec.parameters["properties"]):
        return None
    params = {**made.spec.parameters, "properties": {**made.spec.parameters["properties"], **props}}
    new_effect = effect.model_copy(update={"filters": [*effect.filters, *filters]})
    return _copy(made, "optional_filter", {"parameters": params, "effect": new_effect}, {**made.kinds, **kinds})


def nested_args(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """Move the optional filters (or both identity facts) into one object argument."""
    effect, params = made.spec.effect, made.spec.parameters
    if effect is None:
        return None
    props, required = dict(params["properties"]), list(params["required"])
    if made.operator == "authenticate":
        inner, outer, req = list(required), "identity", True
    else:
        inner = [f.arg[1:] for f in effect.filters if f.arg[1:] not in required]
        outer, req = "filters", False
    if not inner or outer in props:
        return None
    nested = {"type": "object", "properties": {k: props.pop(k) for k in inner},
              "additionalProperties": False, "description": f"{words(outer)}"}
    if req:
        nested["required"] = inner
    props[outer] = nested
    required = [r for r in required if r not in inner] + ([outer] if req else [])
    remap = {f"${k}": f"${outer}.{k}" for k in inner}
    new_effect = effect.model_copy(update={
        "filters": [f.model_copy(update={"arg": remap.get(f.arg, f.arg)}) for f in effect.filters],
        "match": {k: remap.get(v, v) for k, v in effect.match.items()}})
    kinds = {(f"{outer}.{k}" if k in inner else k): v for k, v in made.kinds.items()}
    return _copy(made, "nested_args", {"parameters": {**params, "properties": props, "required": required},
                                       "effect": new_effect}, kinds)


def required_field(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """A transition that also records why (a required reason, stored on the record)."""
    effect, params = made.spec.effect, made.spec.parameters
    if effect is None or made.operator != "transition" or "reason" in params["properties"]:
        return None
    choices = sorted(rng.sample(REASONS, 4))
    props = {**params["properties"], "reason": {"type": "string", "enum": choices, "description": "why"}}
    new_effect = effect.model_copy(update={"set": {**effect.set, "status_reason": "$reason"}})
    return _copy(made, "required_field", {"parameters": {**params, "properties": props,
                                                         "required": [*params["required"], "reason"]},
                                          "effect": new_effect, "description": made.spec.description +
                                          " Needs a reason."}, {**made.kinds, "reason": "enum"})


def permission(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """A write that refuses records of another account (failure mode: permission)."""
    effect, params = made.spec.effect, made.spec.parameters
    entity = d.entity(made.entity)
    acct = d.entity(d.account)
    if effect is None or effect.op not in ("update", "delete") or entity.owner is None or \
            acct.key in params["properties"]:
        return None
    props = {acct.key: param(FieldModel(name=acct.key, kind="ref"), description=f"the {acct.label} id"),
             **params["properties"]}
    check = Precondition(field=entity.owner, op="eq", value=f"${acct.key}",
                         error=f"permission denied: {entity.label} {{{entity.key}}} belongs to another {acct.label}")
    new_effect = effect.model_copy(update={"preconditions": [check, *effect.preconditions]})
    return _copy(made, "permission", {"parameters": {**params, "properties": props,
                                                     "required": [acct.key, *params["required"]]},
                                      "effect": new_effect}, {acct.key: "ref", **made.kinds})


def projection(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """A read that returns only some fields of each record (always its id), as many real APIs do."""
    effect = made.spec.effect
    if effect is None or effect.op not in ("get", "list") or effect.returns is not None or effect.expand or \
            made.operator == "authenticate":
        return None
    entity = d.entity(made.entity)
    others = [f.name for f in entity.fields]
    keep = sorted(rng.sample(others, max(1, len(others) - rng.randint(1, 2))))
    returns = [entity.key, *keep]
    description = f"{made.spec.description} Returns {', '.join(words(f) for f in returns)}."
    return _copy(made, "projection", {"effect": effect.model_copy(update={"returns": returns}),
                                      "description": description}, made.kinds)


def _faults(made: Made) -> ToolFaults:
    return made.spec.faults or ToolFaults()


def rate_limit(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """A rate-limited tool: after `n` calls the next one is refused once (failure mode: rate limit)."""
    if _faults(made).rate_limit is not None:
        return None
    n = rng.randint(1, 3)
    calls = "call" if n == 1 else "calls"
    return _copy(made, "rate_limit", {"faults": _faults(made).model_copy(update={"rate_limit": n}),
                                      "description": f"{made.spec.description} Rate limited: after {n} {calls} the "
                                      "next one is refused; retry it."}, made.kinds)


def transient(made: Made, d: DomainModel, rng: random.Random) -> Made | None:
    """A flaky service: a share of the calls fails and a retry goes through (failure mode: transient)."""
    if _faults(made).transient:
        return None
    share = rng.choice([0.2, 0.3, 0.5])
    return _copy(made, "transient", {"faults": _faults(made).model_copy(update={"transient": share})}, made.kinds)


MUTATIONS = {"optional_filter": optional_filter, "projection": projection, "nested_args": nested_args,
             "required_field": required_field, "permission": permission, "rate_limit": rate_limit,
             "transient": transient}


def mutate(made: Made, d: DomainModel, rng: random.Random) -> Made:
    """Apply each mutation with some chance, in a fixed order."""
    for name in sorted(MUTATIONS):
        if rng.random() < 0.35:
            made = MUTATIONS[name](made, d, rng) or made
    return made


def _param_shape(schema: dict[str, Any], required: bool, depth: int = 0) -> list[Any]:
    kind = schema.get("type", "?")
    if kind == "object":
        inner = schema.get("properties", {})
        return ["object", required, sorted(_param_shape(v, k in schema.get("required", []), depth + 1)
                                           for k, v in inner.items())]
    return [kind, required, "enum" in schema, "minimum" in schema or "maximum" in schema, depth]


def signature(spec: ToolSpec) -> str:
    """The tool's structure with every name masked: parameters by JSON type, the effect by its operations."""
    effect = spec.effect
    required = set(spec.parameters.get("required", []))
    params = sorted(_param_shape(v, k in required) for k, v in spec.parameters.get("properties", {}).items())
    faults = spec.faults or ToolFaults()
    body: dict[str, Any] = {"params": params, "read": spec.read_only,
                            "faults": [faults.rate_limit is not None, faults.transient > 0]}
    if spec.mechanism is not None:
        body |= {"mechanism": spec.mechanism.use, "tool": spec.mechanism.role}
    if effect is not None:
        body |= {"op": effect.op, "aggregate": effect.aggregate, "group": effect.group_by is not None,
                 "filters": sorted(f.op for f in effect.filters), "sort": effect.sort_by is not None,
                 "page": effect.page_arg is not None, "limit": effect.limit, "expand": len(effect.expand),
                 "pre": sorted(p.op for p in effect.preconditions), "set": len(effect.set),
                 "match": len(effect.match), "refs": effect.check_refs,
                 "returns": 0 if effect.returns is None else 1 if isinstance(effect.returns, str) else len(effect.returns)}
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


__all__ = ["MUTATIONS", "Filter", "mutate", "signature"]
