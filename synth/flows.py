"""The mechanism segment: a task step chain over one mechanism's flow (envgym.world.mechanisms), with data flowing
between the calls.

The user's record is found by listing their records and picking the one they describe; the flow's first tool takes
ids from that record (the record itself, its item) and from the authenticated account, every later tool takes the
ids an earlier call returned, values the user states are facts they give when asked, and the answer is a value the
last call returned, which the instruction asks for in words.
"""

from __future__ import annotations

from typing import Any

from envgym.world.mechanisms import CATALOGUE, Bound, tool_defs
from envgym.world.mechanisms.base import Arg, Refusal
from synth.intents import fact_key, flow_request
from synth.lexicon import lexical, words
from synth.mechanize import roles
from synth.program import Expr
from synth.segments import ANSWER_TYPES, AnswerPlan, Builder, Unfit, identify_record, me_expr

ANSWERABLE = {"available": "quantity", "total": "money", "subtotal": "money", "from_balance": "money",
              "to_balance": "money", "credit": "money", "points": "quantity", "earned": "quantity",
              "refunded": "money", "charge": "money", "priority": "quantity", "followers": "quantity",
              "unread": "quantity", "rating": "quantity", "review_count": "quantity", "assignee": "id",
              "open_requests": "quantity", "cost": "money", "spent": "money", "billed_amount": "money",
              "attachments_deleted": "quantity", "records_archived": "quantity", "version": "quantity",
              "state": "enum", "status": "enum", "promoted": "id", "expires_on": "date", "total_charged": "money",
              "marked_read": "quantity", "units": "quantity", "lines": "quantity", "percent": "quantity"}


def _draw(b: Builder, arg: Arg, bound: Bound) -> Any:
    rng = b.rng
    if arg.kind == "int":
        return rng.randint(int(arg.lo), min(int(arg.hi), int(arg.lo) + 3))
    if arg.kind == "number":
        return float(rng.choice([10, 20, 25, 40, 50, 75]))
    if arg.kind == "enum":
        return rng.choice(list(arg.choices or bound.p(arg.choices_param)))
    if arg.kind == "date":
        return rng.choice(["2025-07-14", "2025-07-15", "2025-08-04"])
    if arg.kind == "time":
        return rng.choice(["09:30", "10:00", "13:15", "15:45"])
    if arg.kind == "text":
        return rng.choice(["please ring twice", "ref-" + str(rng.randint(100, 999)), "front desk", "north gate"])
    raise Unfit(f"no value for a {arg.kind} argument")


def seg_mechanism(b: Builder) -> None:
    """Run one flow of one of the world's mechanisms (see the module docstring)."""
    r = roles(b.domain)
    if r is None:
        raise Unfit("no roles")
    present = {spec.name: spec for op, ts in b.tools.items() if op.startswith("mechanism:") for spec, _, _ in ts}
    uses = sorted({op.removeprefix("mechanism:") for op in b.tools if op.startswith("mechanism:")})
    options: list[tuple[Bound, tuple[str, ...]]] = []
    for name in uses:
        spec = next(s for s, _, _ in b.tools[f"mechanism:{name}"])
        assert spec.mechanism is not None
        bound = _bound(b, name)
        defs = {t.verb: t for t in tool_defs(bound)}
        for flow in CATALOGUE[name].flows:
            # Every call of the flow names a record (the user's, its item, or one an earlier call returned).
            if all(bound.arg_name(v) in present and any(a.kind == "key" for a in defs[v].args.values())
                   for v in flow):
                # Chains of two or more calls are drawn three times as often as single calls.
                options += [(bound, flow)] * (3 if len(flow) > 1 else 1)
    if not options:
        raise Unfit("no mechanism flow fits")
    bound, flow = b.rng.choice(options)
    defs = {t.verb: t for t in tool_defs(bound)}
    if not b.mine(r.record):
        raise Unfit("the user has no record")
    target, rec = identify_record(b, r.record)
    have: dict[str, tuple[Expr, Any]] = {}  # argument name -> where its value comes from, and the value
    scratch = b.state.copy()  # the flow is run here as it is built, so the answer is a field it really returns
    held: list[tuple[str, Any]] = []  # (fact key, value) the user gives when asked, in call order
    last, result = "", None
    for verb in flow:
        td = defs[verb]
        spec = present[bound.arg_name(verb)]
        args: dict[str, Expr] = {}
        values: dict[str, Any] = {}
        for name, arg in td.args.items():
            real = bound.arg_name(name)
            if real in have:
                args[real], values[name] = have[real]
            elif arg.kind == "key" and arg.role == "party":
                args[real], values[name] = me_expr(b), b.me[bound.key("party")]
            elif arg.kind == "key" and arg.role == "record":
                args[real] = Expr(src="var", key=rec.key, path=[bound.key("record")])
                values[name] = target[bound.key("record")]
            elif arg.kind == "key" and arg.role == "item":
                args[real] = Expr(src="var", key=rec.key, path=[bound.ref("record", "item")])
                values[name] = target[bound.ref("record", "item")]
            elif arg.kind == "key":
                raise Unfit(f"{real} comes from nowhere")
            elif arg.optional:
                continue
            else:
                values[name] = _draw(b, arg, bound)
                # Named as a person asks for it: "points to redeem", "new memo" (synth.intents.fact_key).
                key = fact_key(verb, name)
                args[real] = b.ask(key, values[name], wanted=True)
                held.append((key, values[name]))
        try:
            result = td.run(bound, scratch, values)
        except Refusal as exc:
            raise Unfit(f"{spec.name}: {exc}") from exc
        save = b.call(spec, args, write=bool(td.writes))
        b.ops[spec.name] = f"mechanism:{bound.m.name}"
        last = save
        if isinstance(result, dict):
            for out, value in result.items():  # ids this call returns feed the next calls
                if out.endswith("_id") and isinstance(value, str):
                    have.setdefault(out, (Expr(src="var", key=save, path=[out]), value))
    if not isinstance(result, dict):
        raise Unfit("the flow's last call returns no fields")
    answerable = sorted(k for k, v in result.items() if k in ANSWERABLE and isinstance(v, int | float | str)
                        and not isinstance(v, bool))
    if not answerable:
        raise Unfit("nothing to answer")
    field = b.rng.choice(answerable)
    kind = ANSWERABLE[field]
    choices = list(r.record.field("status").choices) if kind == "enum" else []
    if kind == "enum" and result[field] not in choices:
        kind, choices = "text", []
    b.answers.append(AnswerPlan(Expr(src="var", key=last, path=[field]), ANSWER_TYPES.get(kind, "text"), choices,
                                lexical(field)))
    # What the person wants in plain words (synth.intents), not the tools' names; the wording is drawn from the
    # flow's own seed, so the task's generator draws exactly what it drew before.
    names = {role: words(bound.one(role)) for role in bound.m.roles}
    names.setdefault("record", words(r.record.name))
    b.say(flow_request(bound.m.name, flow, names, held, field, f"{b.domain.seed}/{b.domain.name}/{last}/{field}"))


_MADE: dict[tuple[str, int], Any] = {}


def _bound(b: Builder, name: str) -> Bound:
    """The use of mechanism `name` as the world has it (its binding is the one synth.mechanize made)."""
    from synth.mechanize import mechanize
    from synth.stages.worlds import domain_entities

    key = (b.domain.name, b.domain.seed)
    if key not in _MADE:  # one domain's tasks are drawn together: its mechanisms are installed once
        _MADE.clear()
        _MADE[key] = mechanize(b.domain, domain_entities(b.domain), set())
    made = _MADE[key]
    use = next(u for u in made.uses if u.id == name)
    return Bound(CATALOGUE[name], use, made.entities)
