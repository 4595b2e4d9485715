"""Task segments: the parts a task program is composed of, each sampled against the seeded world.

A segment adds steps to the program and says what the user wants (a clause of the instruction, and its twin in the
user's own voice without the facts they hold: `request`), what they hold (facts given when asked) and which values
the final answer must contain. `Builder` carries the shared context: the
domain, its verified tools indexed by operator, the initial state and the item's RNG. A segment that does not fit
the sampled world raises `Unfit` and the task is drawn again.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from envgym.world.spec import AnswerType, ToolSpec
from envgym.world.state import Record, WorldState
from synth.lexicon import a, lexical, plural, words
from synth.model import DomainModel, EntityModel, FieldModel
from synth.phrasing import phrase_pair
from synth.program import AskStep, BranchStep, CallStep, EachStep, Expr, PickStep, Step, bind

ANSWER_TYPES: dict[str, AnswerType] = {"money": "money", "quantity": "number", "duration": "number", "date": "date", "time": "time",
                "enum": "enum", "state": "enum", "id": "id", "ref": "id"}
DISTINCT = ("money", "quantity", "duration", "date", "time", "enum", "text")


class Unfit(Exception):
    """The sampled segment does not fit this world (no such tool, no such record)."""


@dataclass
class AnswerPlan:
    expr: Expr
    type: AnswerType
    choices: list[str]
    label: str


@dataclass
class Builder:
    domain: DomainModel
    tools: dict[str, list[tuple[ToolSpec, str, str]]]  # operator -> [(spec, entity, operator)]
    state: WorldState
    rng: random.Random
    me: Record = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    known: dict[str, str] = field(default_factory=dict)
    clauses: list[str] = field(default_factory=list)
    request: list[str] = field(default_factory=list)  # the clauses as the user says them (synth.phrasing.REQUESTS)
    answers: list[AnswerPlan] = field(default_factory=list)
    ops: dict[str, str] = field(default_factory=dict)
    said: list[str] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    my_actions: list[str] = field(default_factory=list)  # the actions in the user's voice, without held facts
    topics: list[str] = field(default_factory=list)  # what the request is about, as the opening may name it
    wanted: list[str] = field(default_factory=list)  # facts that are values the user wants, not facts about them
    n: int = 0

    def say(self, pair: tuple[str, str]) -> None:
        """Add a clause to the instruction and its twin to the user's request."""
        self.clauses.append(pair[0])
        self.request.append(pair[1])

    def tool(self, operator: str, entity: str, ok: Any = None) -> ToolSpec:
        found = [s for s, e, _ in self.tools.get(operator, []) if e == entity and (ok is None or ok(s))]
        if not found:
            raise Unfit(f"no {operator} tool on {entity}")
        return self.rng.choice(found)

    def var(self) -> str:
        self.n += 1
        return f"v{self.n}"

    def ask(self, key: str, value: Any, wanted: bool = False) -> Expr:
        """The user's fact `key` (asked for once); `wanted` marks a value the user wants set or used (a new date,
        a quantity to book), which the user gives as "The X is Y." rather than "My X is Y."."""
        if wanted and key not in self.wanted:
            self.wanted.append(key)
        if key in self.known and self.known[key] != str(value):
            # One phrase ("the invoice total") would name two records: the instruction could not say which.
            raise Unfit(f"two facts under one phrase: {key} is {self.known[key]} and {value}")
        if key not in self.known:
            self.steps.append(AskStep(key=key))
            self.known[key] = str(value)
        cast = "int" if isinstance(value, int) and not isinstance(value, bool) else \
            "float" if isinstance(value, float) else "str"
        return Expr(src="user", key=key, cast=cast)

    def call(self, spec: ToolSpec, avail: dict[str, Expr], write: bool = False) -> str:
        save = self.var()
        self.steps.append(CallStep(tool=spec.name, args=bind(spec, avail), save=save, write=write))
        return save

    @property
    def acct(self) -> EntityModel:
        return self.domain.entity(self.domain.account)

    def mine(self, e: EntityModel) -> list[Record]:
        owner = e.owner or ""
        return [r for _, r in sorted(self.state.tables[e.plural].items()) if r.get(owner) == self.me[self.acct.key]]


def first_person(text: str) -> str:
    """A phrase of ours that speaks to the user ("how many bookings you have", "all your invoices"), in their voice."""
    return re.sub(r"\byour\b", "my", re.sub(r"\byou have\b", "I have", text))


def answer_of(b: Builder, expr: Expr, f: FieldModel | None, label: str, kind: str | None = None) -> AnswerPlan:
    kind = kind or (f.kind if f else "id")
    return AnswerPlan(expr, ANSWER_TYPES.get(kind, "text"), list(f.choices) if f and f.kind in ("enum", "state") else [],
                  label)


def authenticate(b: Builder) -> None:
    spec = b.tool("authenticate", b.domain.account)
    avail = {f: b.ask(f, b.me[f]) for f in b.domain.auth}
    save = b.call(spec, avail)
    b.steps[-1] = b.steps[-1].model_copy(update={"save": "me"})
    b.ops[spec.name] = "authenticate"
    del save


def me_expr(b: Builder) -> Expr:
    return Expr(src="var", key="me")


def owned_entity(b: Builder, need: Any = None) -> EntityModel:
    options = [e for e in b.domain.owned() if len(b.mine(e)) >= 1 and (need is None or need(e))]
    if not options:
        raise Unfit("no owned entity fits")
    return b.rng.choice(options)


def list_mine(b: Builder, e: EntityModel, extra: dict[str, Expr] | None = None) -> str:
    spec = b.tool("search", e.name)
    b.ops[spec.name] = "search"
    return b.call(spec, {b.acct.key: me_expr(b), **(extra or {})})


def identify_record(b: Builder, e: EntityModel, ok: Any = None) -> tuple[Record, Expr]:
    """List my records of `e` and single one out, asking the user which one when there are several."""
    rows = [r for r in b.mine(e) if ok is None or ok(r)]
    if not rows:
        raise Unfit("no record fits")
    target = b.rng.choice(rows)
    everything = b.mine(e)
    listed = list_mine(b, e)
    b.topics.append(f"one of my {words(e.plural)}" if len(everything) > 1 else f"my {e.label}")
    if len(everything) == 1:
        saved = b.var()
        b.steps.append(PickStep(source=Expr(src="var", key=listed), field=e.key, how="eq",
                                equals=Expr(src="var", key=listed, path=[0, e.key]), save=saved))
        return target, Expr(src="var", key=saved)
    keys = [f for f in e.fields if f.kind in DISTINCT and sum(r.get(f.name) == target.get(f.name)
                                                             for r in everything) == 1]
    if not keys:
        raise Unfit("the record cannot be told apart")
    f = b.rng.choice(keys)
    key = f"{e.name}_{f.name}"
    user = b.ask(key, target[f.name])
    saved = b.var()
    b.steps.append(PickStep(source=Expr(src="var", key=listed), field=f.name, how="eq", equals=user, save=saved))
    b.say(phrase_pair(b.rng, "several", plural=words(e.plural), label=e.label, field=lexical(f.name),
                      value=target[f.name]))
    return target, Expr(src="var", key=saved)


def seg_lookup(b: Builder) -> None:
    """Multi-hop: find one of my records, then read a field of it or of the record it references."""
    e = owned_entity(b)
    _, rec = identify_record(b, e)
    refs = [f for f in e.of_kind("ref") if f.ref != b.domain.account]
    if refs and b.rng.random() < 0.6:
        rf = b.rng.choice(refs)
        other = b.domain.entity(rf.ref or "")
        spec = b.tool("get", other.name)
        b.ops[spec.name] = "get"
        got = b.call(spec, {other.key: Expr(src="var", key=rec.key, path=[rf.name])})
        fields = [f for f in other.fields if f.kind in ANSWER_TYPES and f.kind not in ("ref", "id")]
        if not fields:
            raise Unfit("nothing to read")
        f = b.rng.choice(fields)
        b.answers.append(answer_of(b, Expr(src="var", key=got, path=[f.name]), f, f"{lexical(f.name)} of the "
                                                                                   f"{other.label}"))
        b.say(phrase_pair(b.rng, "lookup_ref", field=lexical(f.name), other=other.label, label=e.label))
        return
    fields = [f for f in e.fields if f.kind in ANSWER_TYPES and f.kind not in ("ref", "id")]
    if not fields:
        raise Unfit("nothing to read")
    f = b.rng.choice(fields)
    b.answers.append(answer_of(b, Expr(src="var", key=rec.key, path=[f.name]), f, lexical(f.name)))
    b.say(phrase_pair(b.rng, "lookup", field=lexical(f.name), label=e.label))


def seg_aggregate(b: Builder) -> None:
    """A computed answer: count, total, lowest or highest over my records (by a tool, or computed from a list)."""
    e = owned_entity(b)
    numeric = [f for f in e.fields if f.kind in ("money", "quantity", "duration")]
    how = b.rng.choice(["count", *(["sum", "min", "max"] if numeric else [])])
    f = b.rng.choice(numeric) if how != "count" else None
    tools = [(s, op) for s, ent, op in [t for ts in b.tools.values() for t in ts]
             if ent == e.name and op == f"aggregate_{how}" and (f is None or (s.effect and
                                                                 s.effect.aggregate_field == f.name))]
    what = {"count": f"how many {words(e.plural)} you have",
              "sum": f"the total {words(f.name) if f else ''} over all your {words(e.plural)}",
              "min": f"the lowest {words(f.name) if f else ''} among your {words(e.plural)}",
              "max": f"the highest {words(f.name) if f else ''} among your {words(e.plural)}"}[how]
    kind = "quantity" if how == "count" else (f.kind if f else "quantity")
    if tools and b.rng.random() < 0.6:
        spec, op = b.rng.choice(tools)
        b.ops[spec.name] = op
        got = b.call(spec, {b.acct.key: me_expr(b)})
        path: list[str | int] = [how] if how in ("count", "sum") else [how, "value"]
        b.answers.append(answer_of(b, Expr(src="var", key=got, path=path), f, what, kind))
    else:
        listed = list_mine(b, e)
        if len(b.mine(e)) > (b.tool("search", e.name).effect or _no()).limit:
            raise Unfit("more records than one page")
        b.answers.append(answer_of(b, Expr(src="var", key=listed, reduce=how, field=f.name if f else ""), f,
                                   what, kind))
    b.say(phrase_pair(b.rng, "aggregate", mine={"what": first_person(what)}, what=what))
    b.topics.append(f"my {words(e.plural)}")


def _no() -> Any:
    raise Unfit("no effect")


def _write_on(b: Builder, e: EntityModel, target: Record, rec: Expr, avoid: str = "") -> str:
    """Apply one write to the target record: a workflow transition its state allows, or a field change."""
    options: list[tuple[ToolSpec, str]] = []
    for op in ("transition", "update", "delete"):
        for spec, ent, _ in b.tools.get(op, []):
            if ent != e.name or spec.name == avoid:
                continue
            pre = spec.effect.preconditions if spec.effect else []
            if all(p.field != "status" or target.get("status") in p.value for p in pre):
                options.append((spec, op))
    if not options:
        raise Unfit("no write fits the record")
    spec, op = b.rng.choice(options)
    avail = {e.key: Expr(src="var", key=rec.key, path=[e.key]), b.acct.key: me_expr(b)}
    reason = _reason(b, spec, avail)
    act, my_act = "", ""
    if op == "update":
        fname = next(k for k in spec.parameters["properties"] if k not in (e.key, b.acct.key))
        fm = e.field(fname)
        new = _new_value(b, fm, target.get(fname), spec.parameters["properties"][fname])
        avail[fname] = b.ask(f"new_{fname}", new, wanted=True)
        act, my_act = phrase_pair(b.rng, "update", field=lexical(fname), label=e.label, new=new)
    if op == "transition":
        target_state = spec.effect.set["status"] if spec.effect else ""
        act, my_act = phrase_pair(b.rng, "transition", label=e.label, state=words(target_state))
    if op == "delete":
        act, my_act = phrase_pair(b.rng, "delete", label=e.label)
    b.ops[spec.name] = op
    act += f" (the reason: {reason})" if reason else ""  # the reason is a fact the user gives when asked
    b.actions.append(act)
    b.my_actions.append(my_act)
    b.say(phrase_pair(b.rng, "want", mine={"act": my_act}, act=act))
    b.call(spec, avail, write=True)
    return spec.name


def _reason(b: Builder, spec: ToolSpec, avail: dict[str, Expr]) -> str:
    """Ask for the reason a write requires (a required-field mutation); '' when it needs none."""
    if "reason" not in spec.parameters["properties"]:
        return ""
    value = b.rng.choice(spec.parameters["properties"]["reason"]["enum"])
    avail["reason"] = b.ask("reason", value, wanted=True)
    return str(value)


def _new_value(b: Builder, f: FieldModel, old: Any, schema: dict[str, Any]) -> Any:
    if "enum" in schema:
        options = [c for c in schema["enum"] if c != old]
    elif f.kind == "date":
        options = [f"2026-{m:02d}-{d:02d}" for m in (1, 4, 7, 10) for d in (3, 11, 19, 27)]
    elif f.kind == "time":
        options = [f"{h:02d}:{m}" for h in (8, 10, 13, 15, 17) for m in ("00", "30")]
    else:
        lo, hi = int(schema.get("minimum", 0)), int(schema.get("maximum", 10))
        options = [v for v in range(lo, hi + 1) if v != old][:60]
    if not options:
        raise Unfit("no new value")
    return b.rng.choice(options)


def seg_change(b: Builder) -> None:
    """Identify one of my records (clarifying if needed) and change it."""
    e = owned_entity(b)
    target, rec = identify_record(b, e)
    _write_on(b, e, target, rec)


def seg_compare_act(b: Builder) -> None:
    """Compare: the cheapest/largest of my records by a number, then act on it and name it."""
    e = owned_entity(b, lambda x: bool([f for f in x.fields if f.kind in ("money", "quantity", "duration")])
                     and len(b.mine(x)) >= 2)
    f = b.rng.choice([x for x in e.fields if x.kind in ("money", "quantity", "duration")])
    how = b.rng.choice(["min", "max"])
    rows = b.mine(e)
    values = [r[f.name] for r in rows]
    best = min(values) if how == "min" else max(values)
    if values.count(best) > 1:
        raise Unfit("a tie")
    target = next(r for r in rows if r[f.name] == best)
    listed = list_mine(b, e)
    saved = b.var()
    b.steps.append(PickStep(source=Expr(src="var", key=listed), field=f.name, how=how, save=saved))
    word = "lowest" if how == "min" else "highest"
    b.topics.append(f"my {words(e.plural)}")
    b.say(phrase_pair(b.rng, "compare", plural=words(e.plural), label=e.label, word=word, field=lexical(f.name)))
    _write_on(b, e, target, Expr(src="var", key=saved))
    b.answers.append(answer_of(b, Expr(src="var", key=saved, path=[e.key]), None, f"which {e.label} it was"))
    b.say((f"you want to be told which {e.label} it was", f"I want to be told which {e.label} it was"))


def seg_branch(b: Builder) -> None:
    """Branch on a looked-up value: if the record's number is under (or at least) a threshold the user states,
    act on it; otherwise only report the number."""
    e = owned_entity(b, lambda x: bool([f for f in x.fields if f.kind in ("money", "quantity", "duration")]))
    target, rec = identify_record(b, e)
    f = b.rng.choice([x for x in e.fields if x.kind in ("money", "quantity", "duration")])
    threshold = round(f.lo + (f.hi - f.lo) * b.rng.choice([0.3, 0.5, 0.7]))
    if target[f.name] == threshold:
        raise Unfit("on the threshold")
    op = b.rng.choice(["lt", "ge"])
    outer, b.steps = b.steps, []
    clauses = len(b.clauses)
    _write_on(b, e, target, rec)
    then, b.steps = b.steps, outer
    action, my_action = b.actions[-1], b.my_actions[-1]
    del b.clauses[clauses:], b.request[clauses:]
    condition = f"if its {lexical(f.name)} is {'under' if op == 'lt' else 'at least'} {threshold}"
    b.said.append(f"my {e.label}: {condition}, I want {action.replace('your ', 'my ')}")
    b.say((f"{condition}, you want {action}; otherwise nothing should change, and either way you want "
           f"to be told the {lexical(f.name)}",
           f"{condition}, I want {my_action}; otherwise nothing should change, and either way I want to be told "
           f"the {lexical(f.name)}"))
    b.steps.append(BranchStep(left=Expr(src="var", key=rec.key, path=[f.name]), op=op,
                              right=Expr(src="lit", value=threshold), then=then))
    b.answers.append(answer_of(b, Expr(src="var", key=rec.key, path=[f.name]), f, lexical(f.name)))


def seg_iterate(b: Builder) -> None:
    """Iterate over a filtered set: every one of my records in a given state gets the same transition."""
    e = owned_entity(b, lambda x: bool(x.workflow))
    t = b.rng.choice(e.workflow)
    rows = [r for r in b.mine(e) if r.get("status") in t.source]
    if not 2 <= len(rows) <= 4:
        raise Unfit("not a small set")
    status = rows[0]["status"]
    rows = [r for r in rows if r["status"] == status]
    if len(rows) < 2:
        raise Unfit("not a set")
    b.said.append(f"all my {status} {words(e.plural)}")
    bulk = [s for s, ent, _ in b.tools.get("bulk_transition", []) if ent == e.name and s.effect
            and s.effect.set.get("status") == t.target]
    b.say(phrase_pair(b.rng, "iterate", status=words(status), plural=words(e.plural), label=e.label,
                      target=words(t.target)))
    if bulk and b.rng.random() < 0.5:
        b.ops[bulk[0].name] = "bulk_transition"
        done = b.call(bulk[0], {b.acct.key: me_expr(b), "status": Expr(src="lit", value=status)}, write=True)
        b.answers.append(AnswerPlan(Expr(src="var", key=done, path=["updated"], reduce="count"), "number", [],
                                "how many were changed"))
        b.say(("you want to be told how many were changed", "I want to be told how many were changed"))
        return
    spec = b.tool("transition", e.name, lambda s: s.effect and s.effect.set.get("status") == t.target)
    listed = list_mine(b, e, {"status": Expr(src="lit", value=status)})
    avail = {e.key: Expr(src="var", key="item", path=[e.key]), b.acct.key: me_expr(b)}
    reason = _reason(b, spec, avail)
    b.clauses[-1] += f" (the reason: {reason})" if reason else ""
    b.ops[spec.name] = "transition"
    body: list[Step] = [CallStep(tool=spec.name, args=bind(spec, avail), write=True)]
    b.steps.append(EachStep(source=Expr(src="var", key=listed), var="item", body=body))
    b.answers.append(AnswerPlan(Expr(src="var", key=listed, reduce="count"), "number", [], "how many were changed"))
    b.say(("you want to be told how many were changed", "I want to be told how many were changed"))


def seg_create(b: Builder) -> None:
    """A write that spans entities: find a catalog record by the name the user gives, create a record on it."""
    creates = [(s, ent) for s, ent, _ in b.tools.get("create", [])]
    b.rng.shuffle(creates)
    for spec, ent in creates:
        e = b.domain.entity(ent)
        refs = [f for f in e.of_kind("ref") if f.ref != b.domain.account]
        if len(refs) != 1 or not b.domain.entity(refs[0].ref or "").catalog:
            continue
        cat = b.domain.entity(refs[0].ref or "")
        browse = b.tool("search", cat.name, lambda s: not s.parameters.get("required"))
        items = [r for _, r in sorted(b.state.tables[cat.plural].items())]
        item = b.rng.choice(items[: (browse.effect or _no()).limit])
        name_key = f"{cat.name}_name"
        listed = b.call(browse, {})
        b.ops[browse.name] = "search"
        picked = b.var()
        b.steps.append(PickStep(source=Expr(src="var", key=listed), field="name", how="eq",
                                equals=b.ask(name_key, item["name"], wanted=True), save=picked))
        avail = {b.acct.key: me_expr(b), cat.key: Expr(src="var", key=picked, path=[cat.key])}
        details = []
        for pname, schema in spec.parameters["properties"].items():
            if pname in avail:
                continue
            value = _new_value(b, e.field(pname), None, schema)
            avail[pname] = b.ask(pname, value, wanted=True)
            details.append(f"{words(pname)} {value}")
        made = b.call(spec, avail, write=True)
        b.ops[spec.name] = "create"
        b.topics.append(f"{a(e.label)} for one of your {plural(cat.label)}")
        b.say(phrase_pair(b.rng, "create", a_label=a(e.label), label=e.label, other=cat.label,
                          others=plural(cat.label), name=item["name"],
                          details=f" with {', '.join(details)}" if details else ""))
        b.answers.append(AnswerPlan(Expr(src="var", key=made, path=[e.key]), "id", [], f"the new {e.label} id"))
        return
    raise Unfit("no create tool on a catalog")


SEGMENTS = {"lookup": seg_lookup, "aggregate": seg_aggregate, "change": seg_change, "compare_act": seg_compare_act,
            "branch": seg_branch, "iterate": seg_iterate, "create": seg_create}
