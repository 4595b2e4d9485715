"""Stage 5, tasks: sample a valid tool-call program over the seeded world, replay it, and write the task.

A program is built from the agent's tools by a task kind (cancel, change quantity, create, set a measure, set a
status, report a record or an asset, swap, cancel all). The reference solution is executed on a scratch copy of
the world while it is built, so every call is valid and its results (e.g. a new record's id) feed the user's
instruction, the env assertions, the required outputs and the judge's rubric criteria.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from envgym.llm import ChatModel
from envgym.world.spec import Assertion, TaskSpec, ToolCall, WorldSpec
from envgym.world.state import Record, WorldState
from envgym.world.tools import ToolExecutor
from synth.seeds import content_id
from synth.taxonomy import DomainBlueprint
from synth.worlds import CANCELLED


def _w(name: str) -> str:
    return name.replace("_", " ")


@dataclass
class Program:
    """A reference solution being built on a scratch state; a failing call marks the program invalid."""

    executor: ToolExecutor
    state: WorldState
    roles: dict[str, str]
    calls: list[ToolCall] = field(default_factory=list)

    def call(self, role: str, **arguments: Any) -> Any:
        name = self.roles[role]
        result = self.executor.execute(self.state, name, arguments)
        if not result.ok:
            raise _Invalid(f"{name}: {result.error}")
        self.calls.append(ToolCall(name=name, arguments=arguments))
        return result.value


class _Invalid(Exception):
    """A sampled program turned out invalid on the world (e.g. nothing to cancel)."""


@dataclass
class Draft:
    """Everything a task says besides its solution."""

    kind: str
    instruction: str
    opening: str
    known: dict[str, str]
    assertions: list[Assertion]
    final_reply: str
    outputs: list[str] = field(default_factory=list)
    rubric: list[str] = field(default_factory=list)


@dataclass
class Ctx:
    """What a task builder reads: the blueprint, the initial world and the item's RNG."""

    bp: DomainBlueprint
    initial: WorldState
    rng: random.Random

    @property
    def actors(self) -> dict[str, Record]:
        return self.initial.tables[self.bp.actor.entity]

    @property
    def assets(self) -> dict[str, Record]:
        return self.initial.tables[self.bp.asset.entity]

    @property
    def records(self) -> dict[str, Record]:
        return self.initial.tables[self.bp.record.entity]

    def pick(self, items: list[Any]) -> Any:
        if not items:
            raise _Invalid("nothing to pick from")
        return self.rng.choice(items)

    def open_records(self) -> list[Record]:
        return [r for _, r in sorted(self.records.items()) if r["status"] in self.bp.record.open]

    def named_assets(self, ok: Callable[[Record], bool] = lambda r: True) -> list[Record]:
        """Assets whose name is unique (so a user can name one unambiguously)."""
        names = [r["name"] for r in self.assets.values()]
        return [r for _, r in sorted(self.assets.items()) if names.count(r["name"]) == 1 and ok(r)]


Builder = Callable[[Ctx, Program], Draft]


def _identify(ctx: Ctx, p: Program, actor: Record) -> str:
    return str(p.call("find_actor", email=actor["email"]))


def _locate_record(ctx: Ctx, p: Program, rec: Record, actor_id: str) -> None:
    rid = ctx.bp.record.noun + "_id"
    if "list_records" in p.roles:
        p.call("list_records", **{ctx.bp.actor.noun + "_id": actor_id})
    else:
        p.call("get_record", **{rid: rec[rid]})


def _locate_asset(ctx: Ctx, p: Program, asset: Record) -> dict[str, str]:
    """Look the asset up the way the agent would; returns what the user must know to name it."""
    sid = ctx.bp.asset.noun + "_id"
    if "search_assets" in p.roles:
        p.call("search_assets", query=asset["name"])
        return {f"{ctx.bp.asset.noun}_name": asset["name"]}
    p.call("get_asset", **{sid: asset[sid]})
    return {sid: asset[sid]}


def _common_rubric(bp: DomainBlueprint, identified: bool, writes: bool) -> list[str]:
    criteria = [f"The agent identified the {_w(bp.actor.noun)} by email before acting for them."] if identified else []
    if writes:
        criteria += ["The agent asked for and received explicit confirmation before each change.",
                     f"The agent changed no other {_w(bp.record.entity)} or {_w(bp.asset.entity)} than requested."]
    return criteria


def build_cancel(ctx: Ctx, p: Program) -> Draft:
    r, a = ctx.bp.record, ctx.bp.actor
    rid = r.noun + "_id"
    rec = ctx.pick(ctx.open_records())
    actor = ctx.actors[rec[a.noun + "_id"]]
    reason = ctx.pick(list(r.reasons))
    _locate_record(ctx, p, rec, _identify(ctx, p, actor))
    p.call("cancel_record", **{rid: rec[rid], "reason": reason})
    phrase = ctx.pick([f"{r.cancel_verb} your {_w(r.noun)} {rec[rid]}",
                       f"{r.cancel_verb} the {_w(r.noun)} {rec[rid]} you have"])
    return Draft(
        "cancel", f"You want to {phrase}; the reason is: {reason}.",
        ctx.pick([f"Hi, I need to {r.cancel_verb} my {_w(r.noun)} {rec[rid]}.",
                  f"Hello, please {r.cancel_verb} {_w(r.noun)} {rec[rid]} for me."]),
        {"email": actor["email"], rid: rec[rid], "reason": reason},
        [Assertion(entity=r.entity, key=rec[rid], field="status", value=CANCELLED),
         Assertion(entity=r.entity, key=rec[rid], field="cancel_reason", value=reason)],
        f"Your {_w(r.noun)} {rec[rid]} is now {CANCELLED} ({reason}).",
        rubric=[f"The {_w(r.noun)} {rec[rid]} ends {CANCELLED} with the reason '{reason}'."])


def build_update_qty(ctx: Ctx, p: Program) -> Draft:
    r, a = ctx.bp.record, ctx.bp.actor
    rid = r.noun + "_id"
    rec = ctx.pick(ctx.open_records())
    actor = ctx.actors[rec[a.noun + "_id"]]
    new = ctx.pick([q for q in range(r.qty_min, r.qty_max + 1) if q != rec[r.qty]][:40])
    _locate_record(ctx, p, rec, _identify(ctx, p, actor))
    p.call("update_qty", **{rid: rec[rid], r.qty: new})
    return Draft(
        "update_qty", f"You want the {_w(r.qty)} of your {_w(r.noun)} {rec[rid]} changed to {new}.",
        ctx.pick([f"Can you change the {_w(r.qty)} on my {_w(r.noun)} {rec[rid]}?",
                  f"I'd like to update my {_w(r.noun)} {rec[rid]}."]),
        {"email": actor["email"], rid: rec[rid], f"new_{r.qty}": str(new)},
        [Assertion(entity=r.entity, key=rec[rid], field=r.qty, value=new)],
        f"The {_w(r.qty)} of {_w(r.noun)} {rec[rid]} is now {new}.",
        rubric=[f"The {_w(r.noun)} {rec[rid]} ends with {_w(r.qty)} {new}."])


def build_create(ctx: Ctx, p: Program) -> Draft:
    r, a, s = ctx.bp.record, ctx.bp.actor, ctx.bp.asset
    actor = ctx.pick([v for _, v in sorted(ctx.actors.items())])
    asset = ctx.pick(ctx.named_assets())
    qty = ctx.rng.randint(r.qty_min, min(r.qty_max, r.qty_min + 40))
    actor_id = _identify(ctx, p, actor)
    known = _locate_asset(ctx, p, asset)
    made = p.call("create_record", **{a.noun + "_id": actor_id, s.noun + "_id": asset[s.noun + "_id"], r.qty: qty})
    new_id = made[r.noun + "_id"]
    target = asset["name"] if "search_assets" in p.roles else asset[s.noun + "_id"]
    return Draft(
        "create", f"You want to {r.create_verb} a {_w(r.noun)} on the {_w(s.noun)} {target} with {_w(r.qty)} "
                  f"{qty}, and you want to be told the new {_w(r.noun)}'s id.",
        ctx.pick([f"Hi, I'd like to {r.create_verb} a {_w(r.noun)}.", f"Hello! Could you {r.create_verb} a "
                  f"{_w(r.noun)} for me on {target}?"]),
        {"email": actor["email"], **known, r.qty: str(qty)},
        [Assertion(entity=r.entity, match={a.noun + "_id": actor_id, s.noun + "_id": asset[s.noun + "_id"],
                                           r.qty: qty, "status": r.open[0]})],
        f"Done: your new {_w(r.noun)} is {new_id}.", outputs=[new_id],
        rubric=[f"A new {_w(r.noun)} for {actor['name']} on {asset['name']} with {_w(r.qty)} {qty} exists.",
                f"The agent told the user the new id {new_id}."])


def build_set_measure(ctx: Ctx, p: Program) -> Draft:
    s = ctx.bp.asset
    asset = ctx.pick(ctx.named_assets(lambda x: x["status"] != s.states[-1]))
    value = ctx.rng.randint(int(s.min), int(s.max))
    if value == asset[s.measure]:
        raise _Invalid("value unchanged")
    known = _locate_asset(ctx, p, asset)
    target = asset["name"] if "search_assets" in p.roles else asset[s.noun + "_id"]
    p.call("set_measure", **{s.noun + "_id": asset[s.noun + "_id"], "value": value})
    return Draft(
        "set_measure", f"You want the {_w(s.measure)} of the {_w(s.noun)} {target} set to {value} {s.unit}.",
        ctx.pick([f"Please set {target} to a {_w(s.measure)} of {value}.",
                  f"I need to change the {_w(s.measure)} on one of the {_w(s.entity)}."]),
        {**known, f"new_{s.measure}": f"{value} {s.unit}"},
        [Assertion(entity=s.entity, key=asset[s.noun + "_id"], field=s.measure, value=value)],
        f"The {_w(s.measure)} of {target} is now {value} {s.unit}.",
        rubric=[f"{asset['name']} ends with {_w(s.measure)} {value} {s.unit}."])


def build_set_status(ctx: Ctx, p: Program) -> Draft:
    s = ctx.bp.asset
    asset = ctx.pick(ctx.named_assets())
    status = ctx.pick([x for x in s.states if x != asset["status"]])
    known = _locate_asset(ctx, p, asset)
    target = asset["name"] if "search_assets" in p.roles else asset[s.noun + "_id"]
    p.call("set_status", **{s.noun + "_id": asset[s.noun + "_id"], "status": status})
    return Draft(
        "set_status", f"You want the {_w(s.noun)} {target} marked as {_w(status)}.",
        ctx.pick([f"Please mark {target} as {_w(status)}.", f"The {_w(s.noun)} {target} needs a status change."]),
        {**known, "new_status": status},
        [Assertion(entity=s.entity, key=asset[s.noun + "_id"], field="status", value=status)],
        f"{target} is now marked {status}.", rubric=[f"{asset['name']} ends with status '{status}'."])


def build_read_record(ctx: Ctx, p: Program) -> Draft:
    r, a = ctx.bp.record, ctx.bp.actor
    rid = r.noun + "_id"
    rec = ctx.pick([v for _, v in sorted(ctx.records.items())])
    actor = ctx.actors[rec[a.noun + "_id"]]
    _locate_record(ctx, p, rec, _identify(ctx, p, actor))
    return Draft(
        "read_record", f"You want to know the status and the {_w(r.qty)} of your {_w(r.noun)} {rec[rid]}.",
        f"What is the status of my {_w(r.noun)} {rec[rid]}, and its {_w(r.qty)}?",
        {"email": actor["email"], rid: rec[rid]}, [],
        f"{_w(r.noun).capitalize()} {rec[rid]} is {rec['status']} with {_w(r.qty)} {rec[r.qty]}.",
        outputs=[str(rec["status"]), str(rec[r.qty])],
        rubric=[f"The agent reported status '{rec['status']}' and {_w(r.qty)} {rec[r.qty]} exactly.",
                "The agent changed nothing."])


def build_read_asset(ctx: Ctx, p: Program) -> Draft:
    s = ctx.bp.asset
    asset = ctx.pick(ctx.named_assets())
    sid = s.noun + "_id"
    p.call("search_assets", query=asset["name"])
    p.call("get_asset", **{sid: asset[sid]})
    return Draft(
        "read_asset", f"You want to know the current {_w(s.measure)} of the {_w(s.noun)} {asset['name']}.",
        f"What is the {_w(s.measure)} of {asset['name']} right now?",
        {f"{s.noun}_name": asset["name"]}, [],
        f"{asset['name']} has a {_w(s.measure)} of {asset[s.measure]} {s.unit}.", outputs=[str(asset[s.measure])],
        rubric=[f"The agent reported {_w(s.measure)} {asset[s.measure]} exactly.", "The agent changed nothing."])


def build_swap(ctx: Ctx, p: Program) -> Draft:
    r, a, s = ctx.bp.record, ctx.bp.actor, ctx.bp.asset
    rid, aid, sid = r.noun + "_id", a.noun + "_id", s.noun + "_id"
    rec = ctx.pick(ctx.open_records())
    actor = ctx.actors[rec[aid]]
    asset = ctx.pick(ctx.named_assets(lambda x: x[sid] != rec[sid]))
    reason = ctx.pick(list(r.reasons))
    actor_id = _identify(ctx, p, actor)
    _locate_record(ctx, p, rec, actor_id)
    p.call("cancel_record", **{rid: rec[rid], "reason": reason})
    known = _locate_asset(ctx, p, asset)
    made = p.call("create_record", **{aid: actor_id, sid: asset[sid], r.qty: rec[r.qty]})
    target = asset["name"] if "search_assets" in p.roles else asset[sid]
    return Draft(
        "swap", f"You want to {r.cancel_verb} your {_w(r.noun)} {rec[rid]} ({reason}) and {r.create_verb} a new "
                f"one on the {_w(s.noun)} {target} with the same {_w(r.qty)} ({rec[r.qty]}); ask for the new id.",
        f"Hi, I want to move my {_w(r.noun)} {rec[rid]} to a different {_w(s.noun)}.",
        {"email": actor["email"], rid: rec[rid], "reason": reason, **known},
        [Assertion(entity=r.entity, key=rec[rid], field="status", value=CANCELLED),
         Assertion(entity=r.entity, match={aid: actor_id, sid: asset[sid], r.qty: rec[r.qty], "status": r.open[0]})],
        f"{rec[rid]} is {CANCELLED} and your new {_w(r.noun)} is {made[rid]}.", outputs=[made[rid]],
        rubric=[f"{rec[rid]} ends {CANCELLED} and a new {_w(r.noun)} on {asset['name']} exists.",
                f"The agent told the user the new id {made[rid]}."])


def build_cancel_all(ctx: Ctx, p: Program) -> Draft:
    r, a = ctx.bp.record, ctx.bp.actor
    rid, aid = r.noun + "_id", a.noun + "_id"
    status = ctx.pick(list(r.open))
    by_actor: dict[str, list[Record]] = {}
    for rec in ctx.open_records():
        if rec["status"] == status:
            by_actor.setdefault(rec[aid], []).append(rec)
    owners = sorted(k for k, v in by_actor.items() if 2 <= len(v) <= 3)
    actor = ctx.actors[ctx.pick(owners)]
    reason = ctx.pick(list(r.reasons))
    actor_id = _identify(ctx, p, actor)
    p.call("list_records", **{aid: actor_id, "status": status})
    targets = by_actor[actor[aid]]
    for rec in targets:
        p.call("cancel_record", **{rid: rec[rid], "reason": reason})
    return Draft(
        "cancel_all", f"You want to {r.cancel_verb} every one of your {_w(r.entity)} that is {_w(status)} "
                      f"(reason: {reason}); leave the others alone.",
        f"Hi, please {r.cancel_verb} all my {_w(status)} {_w(r.entity)}.",
        {"email": actor["email"], "reason": reason},
        [Assertion(entity=r.entity, key=rec[rid], field="status", value=CANCELLED) for rec in targets],
        f"{', '.join(t[rid] for t in targets)} are now {CANCELLED}.",
        rubric=[f"Exactly {len(targets)} {_w(r.entity)} ({', '.join(t[rid] for t in targets)}) end {CANCELLED}."])


# kind -> (builder, roles it needs, alternatives: at least one of each inner tuple)
BUILDERS: dict[str, tuple[Builder, tuple[str, ...], tuple[tuple[str, ...], ...]]] = {
    "cancel": (build_cancel, ("find_actor", "cancel_record"), (("list_records", "get_record"),)),
    "update_qty": (build_update_qty, ("find_actor", "update_qty"), (("list_records", "get_record"),)),
    "create": (build_create, ("find_actor", "create_record"), (("search_assets", "get_asset"),)),
    "set_measure": (build_set_measure, ("set_measure",), (("search_assets", "get_asset"),)),
    "set_status": (build_set_status, ("set_status",), (("search_assets", "get_asset"),)),
    "read_record": (build_read_record, ("find_actor",), (("list_records", "get_record"),)),
    "read_asset": (build_read_asset, ("search_assets", "get_asset"), ()),
    "swap": (build_swap, ("find_actor", "cancel_record", "create_record"),
             (("list_records", "get_record"), ("search_assets", "get_asset"))),
    "cancel_all": (build_cancel_all, ("find_actor", "list_records", "cancel_record"), ()),
}


def feasible_kinds(roles: list[str]) -> list[str]:
    have = set(roles)
    return [k for k, (_, needs, alts) in BUILDERS.items()
            if set(needs) <= have and all(have & set(alt) for alt in alts)]


def paraphrase(model: ChatModel, text: str, keep: list[str]) -> str | None:
    """A model's rewording of a user message, kept only if every fact in `keep` survives verbatim."""
    prompt = ("Rewrite this customer message in different words. Keep every id, name, email and number exactly. "
              f"Reply with the rewritten message only.\n\nMessage: {text}")
    reply = model.chat([{"role": "user", "content": prompt}], max_tokens=96, temperature=0.0, seed=0).text.strip()
    if not reply or len(reply) > 400 or "<" in reply or not all(k in reply for k in keep):
        return None
    return reply


def make_task(world: WorldSpec, roles: dict[str, str], bp: DomainBlueprint, initial: WorldState, kind: str,
              rng: random.Random, executor: ToolExecutor, model: ChatModel | None = None) -> TaskSpec | None:
    """One task of `kind` whose reference solution runs on `initial`, or None if the sample was invalid."""
    builder = BUILDERS[kind][0]
    program = Program(executor, initial.copy(), roles)
    try:
        draft = builder(Ctx(bp, initial, rng), program)
    except _Invalid:
        return None
    opening, paraphrased = draft.opening, False
    if model is not None:
        keep = [v for v in draft.known.values() if v in draft.opening]
        reworded = paraphrase(model, draft.opening, keep)
        if reworded is not None:
            opening, paraphrased = reworded, True
    solution = [c.model_dump(mode="json") for c in program.calls]
    writes = any(not world.tools[[t.name for t in world.tools].index(c.name)].read_only for c in program.calls)
    body = {"kind": kind, "instruction": draft.instruction, "solution": solution}
    return TaskSpec(
        id=f"{kind}_{content_id(body, 12)}", instruction=draft.instruction, opening=opening, user_known=draft.known,
        solution=program.calls, final_reply=draft.final_reply, assertions=draft.assertions,
        required_outputs=draft.outputs,
        rubric=[*draft.rubric, *_common_rubric(bp, program.calls[0].name == roles.get("find_actor"), writes)],
        tags=[kind, "write" if writes else "read"],
        meta={"kind": kind, "paraphrased": paraphrased, "constraints": []},
    )
