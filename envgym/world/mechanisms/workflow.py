"""Mechanisms over a record's life and time: state machines, approvals, dependencies, expiry, check-in,
escalation, least-loaded assignment, schedule conflicts, opening hours and change cut-offs."""

from __future__ import annotations

from collections import Counter
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef, seeded
from envgym.world.spec import FieldSpec

# A transition's tool is named by the state it reaches: the verb whose past participle the state is.
VERBS = {"confirmed": "confirm", "cancelled": "cancel", "canceled": "cancel", "completed": "complete",
         "approved": "approve", "rejected": "reject", "closed": "close", "archived": "archive", "paused": "pause",
         "resumed": "resume", "shipped": "ship", "delivered": "deliver", "refunded": "refund", "returned": "return",
         "suspended": "suspend", "activated": "activate", "active": "activate", "published": "publish",
         "scheduled": "schedule", "resolved": "resolve", "reopened": "reopen", "finished": "finish",
         "submitted": "submit", "accepted": "accept", "declined": "decline", "started": "start",
         "running": "start", "expired": "expire", "dropped": "drop", "withdrawn": "withdraw", "verified": "verify",
         "aborted": "abort", "released": "release", "assigned": "assign", "done": "finish", "settled": "settle",
         "filled": "fill", "posted": "post", "void": "void", "voided": "void", "enrolled": "enroll",
         "booked": "book", "checked_in": "check_in", "completed_ok": "complete", "held": "hold", "sent": "send",
         "in_transit": "dispatch", "dispatched": "dispatch", "open": "reopen", "pending": "submit"}


def transition_verb(target: str) -> str:
    """The tool verb of the transition into `target` (`confirmed` -> `confirm_{record}`)."""
    verb = VERBS.get(target)
    return f"{verb}_{{record}}" if verb else f"mark_{{record}}_{target}"


def _sm_transitions(b: Bound) -> list[tuple[list[str], str]]:
    return [(list(src), str(dst)) for src, dst in b.p("transitions")]


def _sm_prepare(b: Bound, state: State) -> None:
    states = b.p("states")
    for r in b.each(state, "record"):
        if r.get(b.f("record", "status")) not in states:
            r[b.f("record", "status")] = states[0]


def _sm_invariant(b: Bound, state: State) -> str | None:
    allowed = {(s, dst) for src, dst in _sm_transitions(b) for s in src}
    last: dict[str, str] = {}
    for row in b.rows(state, "status_changes"):
        if (row["from_status"], row["to_status"]) not in allowed:
            return f"{row['from_status']} -> {row['to_status']} is not a transition"
        if row["from_status"] != last.get(str(row[b.key("record")]), row["from_status"]):
            return f"{row[b.key('record')]}: a transition left a state the record was not in"
        last[str(row[b.key("record")])] = row["to_status"]
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        status = r[b.f("record", "status")]
        if status not in b.p("states") or (key in last and last[key] != status):
            return f"{b.word('record')} {key} is {status}, its history says {last.get(key)}"
    return None


def _move(src: list[str], dst: str) -> Any:
    def run(b: Bound, state: State, a: dict[str, Any]) -> Any:
        record = b.get(state, "record", a["@record"])
        now = record[b.f("record", "status")]
        if now not in src:
            raise Refusal(f"{b.word('record')} {a['@record']} is {now}; only {' or '.join(src)} ones can become {dst}")
        record[b.f("record", "status")] = dst
        b.insert(state, "status_changes", {b.key("record"): a["@record"], "from_status": now, "to_status": dst})
        return {b.key("record"): a["@record"], "status": dst, "was": now}
    return run


def _sm_tools(b: Bound) -> tuple[ToolDef, ...]:
    out = []
    for src, dst in _sm_transitions(b):
        out.append(ToolDef(transition_verb(dst), f"Move {{a_record}} to {dst.replace('_', ' ')}; only "
                           f"{' or '.join(s.replace('_', ' ') for s in src)} ones can. Returns its new status.",
                           {"@record": Arg("key", "the {record} id", "record")}, _move(src, dst),
                           writes=("record", "status_changes"), reaches=dst))
    out.append(ToolDef("get_{record}_history", "The status changes of {a_record}, oldest first.",
                       {"@record": Arg("key", "the {record} id", "record")}, _history))
    return tuple(out)


def _history(b: Bound, state: State, a: dict[str, Any]) -> Any:
    if b.peek(state, "record", a["@record"]) is None:
        raise Refusal(f"no {b.word('record')} with id {a['@record']}", "not_found")
    return [{"from": r["from_status"], "to": r["to_status"]} for r in b.rows(state, "status_changes")
            if r[b.key("record")] == a["@record"]]


STATE_MACHINE = Mechanism(
    name="state_machine",
    rule="a record moves only along declared transitions, each tool named by the state it reaches and refused "
         "from any state it does not leave; every move is logged",
    roles=("record",),
    tools=(),
    expand=_sm_tools,
    tables=lambda b: b.log("status_changes", "change_id", "SC", {**b.refs("record"), "from_status": FieldSpec(),
                                                                 "to_status": FieldSpec()}),
    params={"states": ["open", "confirmed", "completed", "cancelled"],
            "transitions": [[["open"], "confirmed"], [["confirmed"], "completed"], [["open", "confirmed"], "cancelled"]]},
    invariant=_sm_invariant, prepare=_sm_prepare, owns=("record.status", "status_changes.rows"),
    flows=(("confirm_{record}", "get_{record}_history"),),
)


# ---------------------------------------------------------------- approval_threshold
def _approval_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "approval")] = "draft"
        r[b.f("record", "approved_by")] = None


def _approval_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        status, amount = r[b.f("record", "approval")], r[b.f("record", "request_amount")]
        if status == "auto_approved" and amount > b.p("threshold"):
            return f"{key}: {amount} was approved automatically above {b.p('threshold')}"
        if status == "approved" and r[b.f("record", "approved_by")] in (None, r[b.ref("record", "party")]):
            return f"{key}: approved without a second {b.word('party')}"
    return None


def _submit(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "approval")] != "draft":
        raise Refusal(f"{b.word('record')} {a['@record']} was already submitted")
    auto = record[b.f("record", "request_amount")] <= b.p("threshold")
    record[b.f("record", "approval")] = "auto_approved" if auto else "pending_approval"
    return {b.key("record"): a["@record"], "approval": record[b.f("record", "approval")]}


def _approve(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    b.get(state, "party", a["approver_id"])
    if record[b.f("record", "approval")] != "pending_approval":
        raise Refusal(f"{b.word('record')} {a['@record']} is {record[b.f('record', 'approval')]}, not pending approval")
    if a["approver_id"] == record[b.ref("record", "party")]:
        raise Refusal("a request cannot be approved by the one who made it")
    record[b.f("record", "approval")] = "approved"
    record[b.f("record", "approved_by")] = a["approver_id"]
    return {b.key("record"): a["@record"], "approval": "approved"}


APPROVAL = Mechanism(
    name="approval_threshold",
    rule="a request at or under the threshold is approved on submission; above it, it waits for another party's "
         "approval (never its own)",
    roles=("party", "record"),
    fields={"record": {"request_amount": FieldSpec(type="number", min=50, max=2000, decimals=2),
                       "approval": FieldSpec(value="draft"), "approved_by": FieldSpec()}},
    params={"threshold": 1000},
    tools=(
        ToolDef("submit_{record}_for_approval", "Submit {a_record}: up to {threshold} it is approved at once, above "
                "it waits for approval. Returns the approval state.",
                {"@record": Arg("key", "the {record} id", "record")}, _submit, writes=("record",)),
        ToolDef("approve_{record}", "Approve {a_record} waiting for approval; the approver must be another {party}.",
                {"@record": Arg("key", "the {record} id", "record"),
                 "approver_id": Arg("key", "the approving {party} id", "party")}, _approve, writes=("record",),
                reaches="approved"),
    ),
    invariant=_approval_invariant, prepare=_approval_prepare,
    owns=("record.approval", "record.approved_by", "record.request_amount"),
    flows=(("submit_{record}_for_approval", "approve_{record}"),),
    suits=("expense", "purchase", "request", "leave", "claim", "order", "procurement", "grant", "budget",
           "contract", "review", "privacy", "maintenance", "access", "install", "publication"),
)


# ---------------------------------------------------------------- dependencies
def _dep_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "deps")
    keys = sorted(state.table(b.ent("record")))
    for i, r in enumerate(b.each(state, "record")):
        r[b.f("record", "depends_on")] = sorted(rng.sample(keys[:i], min(i, rng.randint(0, 2))))
        r[b.f("record", "done")] = False


def _dep_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "done")]:
            for dep in r[b.f("record", "depends_on")]:
                d = b.peek(state, "record", dep)
                if d is not None and not d[b.f("record", "done")]:  # a deleted dependency no longer blocks
                    return f"{key} is done before {dep}"
    return None


def _complete(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "done")]:
        raise Refusal(f"{b.word('record')} {a['@record']} is already done")
    waiting = [d for d in record[b.f("record", "depends_on")] if not (b.peek(state, "record", d) or {
        b.f("record", "done"): True})[b.f("record", "done")]]
    if waiting:
        raise Refusal(f"{b.word('record')} {a['@record']} waits for {', '.join(waiting)} to be done first")
    record[b.f("record", "done")] = True
    return {b.key("record"): a["@record"], "done": True}


def _deps(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.peek(state, "record", a["@record"])
    if record is None:
        raise Refusal(f"no {b.word('record')} with id {a['@record']}", "not_found")
    return [{b.key("record"): d, "done": (b.peek(state, "record", d) or {}).get(b.f("record", "done"))}
            for d in record[b.f("record", "depends_on")]]


DEPENDENCIES = Mechanism(
    name="dependencies",
    rule="a record can be finished only after every record it depends on is finished",
    roles=("record",),
    fields={"record": {"depends_on": FieldSpec(type="list"), "done": FieldSpec(type="boolean")}},
    tools=(
        ToolDef("finish_{record}", "Mark {a_record} done; every {record} it depends on must be done first.",
                {"@record": Arg("key", "the {record} id", "record")}, _complete, writes=("record",), reaches="done"),
        ToolDef("list_{record}_dependencies", "The {record}s {a_record} depends on, each with whether it is done.",
                {"@record": Arg("key", "the {record} id", "record")}, _deps),
    ),
    invariant=_dep_invariant, prepare=_dep_prepare, owns=("record.done", "record.depends_on"),
    flows=(("list_{record}_dependencies", "finish_{record}"),),
    suits=("task", "project", "job", "pipeline", "build", "step", "ticket", "course", "module", "work",
           "run", "production", "batch", "protocol", "lab", "publication", "cms", "article"),
)


# ---------------------------------------------------------------- expiry_renewal
DATES = [f"2025-{m:02d}-{d:02d}" for m in (2, 4, 6, 8, 10, 12) for d in (3, 17)]


def _add_months(date: str, months: int) -> str:
    y, m, d = (int(x) for x in date.split("-"))
    m += months
    y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
    return f"{y:04d}-{m:02d}-{min(d, 28):02d}"


def _expiry_invariant(b: Bound, state: State) -> str | None:
    for row in b.rows(state, "uses"):
        if row["on"] > row["valid_until"]:
            return f"use {row['use_id']} happened after its expiry"
    return None


def _renew(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    base = max(str(record[b.f("record", "expires_on")] or b.p("today")), b.p("today"))
    record[b.f("record", "expires_on")] = _add_months(base, int(a["months"]))
    return {b.key("record"): a["@record"], "expires_on": record[b.f("record", "expires_on")]}


def _use(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    until = str(record[b.f("record", "expires_on")] or "")
    if until < b.p("today"):
        raise Refusal(f"{b.word('record')} {a['@record']} expired on {until}; renew it first")
    made = b.insert(state, "uses", {b.key("record"): a["@record"], "on": b.p("today"), "valid_until": until})
    return {"use_id": made["use_id"], "expires_on": until}


EXPIRY = Mechanism(
    name="expiry_renewal",
    rule="an expired record cannot be used until renewed; a renewal extends from the later of its expiry and today",
    roles=("record",),
    fields={"record": {"expires_on": FieldSpec(choices=DATES)}},
    tables=lambda b: b.log("uses", "use_id", "US", {**b.refs("record"), "on": FieldSpec(), "valid_until": FieldSpec()}),
    params={"today": "2025-07-01"},
    tools=(
        ToolDef("renew_{record}", "Extend {a_record} by some months, from its expiry or from today ({today}) if "
                "it has already expired. Returns the new expiry date.",
                {"@record": Arg("key", "the {record} id", "record"), "months": Arg("int", "months", lo=1, hi=12)},
                _renew, writes=("record",)),
        ToolDef("use_{record}", "Record a use of {a_record} today; refused once it has expired.",
                {"@record": Arg("key", "the {record} id", "record")}, _use, writes=("uses",)),
    ),
    invariant=_expiry_invariant, owns=("record.expires_on", "uses.rows"),
    flows=(("renew_{record}", "use_{record}"),),
    suits=("license", "subscription", "membership", "pass", "permit", "policy", "certificate", "warranty",
           "plan", "access", "code", "domain", "report"),
)


# ---------------------------------------------------------------- check_in
def _checkin_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "visit")
    for r in b.each(state, "record"):
        r[b.f("record", "visit_date")] = rng.choice([b.p("today"), "2025-07-02", "2025-06-30"])
        r[b.f("record", "checked_in")] = False


def _checkin_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "checked_in")] and r[b.f("record", "visit_date")] != b.p("today"):
            return f"{key} checked in on a day other than its visit date"
    return None


def _check_in(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "checked_in")]:
        raise Refusal(f"{b.word('record')} {a['@record']} is already checked in")
    if record[b.f("record", "visit_date")] != b.p("today"):
        raise Refusal(f"{b.word('record')} {a['@record']} is for {record[b.f('record', 'visit_date')]}; check-in is "
                      f"only on that day (today is {b.p('today')})")
    record[b.f("record", "checked_in")] = True
    return {b.key("record"): a["@record"], "checked_in": True}


CHECK_IN = Mechanism(
    name="day_of_check_in",
    rule="a record checks in once, and only on its visit date",
    roles=("record",),
    fields={"record": {"visit_date": FieldSpec(), "checked_in": FieldSpec(type="boolean")}},
    params={"today": "2025-07-01"},
    tools=(ToolDef("check_in_{record}", "Check in {a_record}; only on its visit date (today is {today}), once.",
                   {"@record": Arg("key", "the {record} id", "record")}, _check_in, writes=("record",),
                   reaches="checked_in"),),
    invariant=_checkin_invariant, prepare=_checkin_prepare, owns=("record.checked_in", "record.visit_date"),
    flows=(("check_in_{record}",),),
    suits=("appointment", "visit", "flight", "booking", "reservation", "event", "clinic", "hotel", "class",
           "tour", "viewing", "patient", "tutoring", "session", "concert", "rental"),
)


# ---------------------------------------------------------------- escalation
def _esc_invariant(b: Bound, state: State) -> str | None:
    ups: Counter[str] = Counter(str(e[b.key("record")]) for e in b.rows(state, "escalations"))
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "priority")] != r[b.f("record", "base_priority")] + ups[key] or r[
                b.f("record", "priority")] > b.p("max_priority"):
            return f"{key}: priority {r[b.f('record', 'priority')]} with {ups[key]} escalations"
    return None


def _esc_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "base_priority")] = r[b.f("record", "priority")]


def _escalate(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "priority")] >= b.p("max_priority"):
        raise Refusal(f"{b.word('record')} {a['@record']} is already at the top priority {b.p('max_priority')}")
    record[b.f("record", "priority")] += 1
    b.insert(state, "escalations", {b.key("record"): a["@record"], "reason": a["reason"]})
    return {b.key("record"): a["@record"], "priority": record[b.f("record", "priority")]}


ESCALATION = Mechanism(
    name="escalation",
    rule="an escalation raises priority by one up to the top level and is logged with its reason",
    roles=("record",),
    fields={"record": {"priority": FieldSpec(type="integer", min=1, max=3), "base_priority": FieldSpec(
        type="integer")}},
    tables=lambda b: b.log("escalations", "escalation_id", "ES", {**b.refs("record"), "reason": FieldSpec()}),
    params={"max_priority": 4},
    tools=(ToolDef("escalate_{record}", "Raise the priority of {a_record} by one (up to {max_priority}), with a "
                   "reason. Returns the new priority.",
                   {"@record": Arg("key", "the {record} id", "record"), "reason": Arg("text", "why")}, _escalate,
                   writes=("record", "escalations")),),
    invariant=_esc_invariant, prepare=_esc_prepare, owns=("record.priority", "escalations.rows"),
    flows=(("escalate_{record}",),),
    suits=("ticket", "support", "incident", "claim", "repair", "complaint", "issue", "request", "case",
           "alert", "helpdesk", "maintenance", "privacy", "review", "robot", "mission"),
)


# ---------------------------------------------------------------- least_loaded_assignment
def _assign_prepare(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "load")] = 0
    for r in b.each(state, "record"):
        r[b.f("record", "assignee")] = None


def _assign_invariant(b: Bound, state: State) -> str | None:
    load: Counter[str] = Counter(str(r[b.f("record", "assignee")]) for r in b.rows(state, "record")
                                 if r[b.f("record", "assignee")] is not None)
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if p[b.f("party", "load")] != load[key]:
            return f"{key}: load {p[b.f('party', 'load')]} but {load[key]} assigned"
    return None


def _assign(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "assignee")] is not None:
        raise Refusal(f"{b.word('record')} {a['@record']} is already assigned to {record[b.f('record', 'assignee')]}")
    # The least-loaded party, ties to the smallest key: the rule decides, not the caller.
    who = min(state.table(b.ent("party")).peek_items(),  # type: ignore[attr-defined]
              key=lambda kv: (kv[1][b.f("party", "load")], kv[0]))[0]
    record[b.f("record", "assignee")] = who
    b.get(state, "party", who)[b.f("party", "load")] += 1
    return {b.key("record"): a["@record"], "assignee": who}


def _unassign(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    who = record[b.f("record", "assignee")]
    if who is None:
        raise Refusal(f"{b.word('record')} {a['@record']} is not assigned")
    record[b.f("record", "assignee")] = None
    b.get(state, "party", who)[b.f("party", "load")] -= 1
    return {b.key("record"): a["@record"], "assignee": None}


LEAST_LOADED = Mechanism(
    name="least_loaded_assignment",
    rule="an assignment goes to the party with the fewest assigned records (ties to the lowest id); loads count "
         "exactly the assigned records",
    roles=("party", "record"),
    fields={"party": {"load": FieldSpec(type="integer")}, "record": {"assignee": FieldSpec()}},
    tools=(
        ToolDef("auto_assign_{record}", "Assign {a_record} to the {party} with the fewest assigned (ties to the "
                "lowest id). Returns who got it.", {"@record": Arg("key", "the {record} id", "record")}, _assign,
                writes=("record", "party"), reaches="assigned"),
        ToolDef("unassign_{record}", "Take {a_record} off its assignee.",
                {"@record": Arg("key", "the {record} id", "record")}, _unassign, writes=("record", "party")),
    ),
    invariant=_assign_invariant, prepare=_assign_prepare, owns=("party.load", "record.assignee", "record.rows"),
    flows=(("auto_assign_{record}", "unassign_{record}"),),
    suits=("ticket", "support", "task", "case", "delivery", "job", "lead", "claim", "request", "repair",
           "helpdesk", "maintenance", "mission", "robot", "review", "install", "technician", "operator"),
)


# ---------------------------------------------------------------- schedule_conflict
def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


def _sched_prepare(b: Bound, state: State) -> None:
    nxt: Counter[tuple[str, str]] = Counter()
    for r in b.each(state, "record"):  # back to back from 09:00 per item and day: no overlaps to start from
        slot = (str(r[b.ref("record", "item")]), str(r[b.f("record", "slot_date")]))
        r[b.f("record", "slot_minutes")] = r[b.f("record", "slot_minutes")] or 30
        start = 540 + nxt[slot]
        r[b.f("record", "slot_start")] = f"{start // 60:02d}:{start % 60:02d}"
        nxt[slot] += r[b.f("record", "slot_minutes")]


def _overlaps(b: Bound, state: State, key: str, item: str, date: str, start: int, length: int) -> str | None:
    for k, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if k == key or str(r[b.ref("record", "item")]) != item or r[b.f("record", "slot_date")] != date or \
                r[b.f("record", "slot_start")] is None:
            continue
        s = _minutes(r[b.f("record", "slot_start")])
        if start < s + r[b.f("record", "slot_minutes")] and s < start + length:
            return str(k)
    return None


def _sched_invariant(b: Bound, state: State) -> str | None:
    for k, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "slot_start")] is None:  # a record made since, not scheduled yet
            continue
        other = _overlaps(b, state, k, str(r[b.ref("record", "item")]), r[b.f("record", "slot_date")],
                          _minutes(r[b.f("record", "slot_start")]), r[b.f("record", "slot_minutes")])
        if other is not None:
            return f"{k} overlaps {other}"
    return None


def _reschedule(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    start = _minutes(a["start_time"])
    if not 420 <= start <= 1200:
        raise Refusal("slots start between 07:00 and 20:00")
    record[b.f("record", "slot_minutes")] = record[b.f("record", "slot_minutes")] or 30
    clash = _overlaps(b, state, a["@record"], str(record[b.ref("record", "item")]), a["date"], start,
                      record[b.f("record", "slot_minutes")])
    if clash is not None:
        raise Refusal(f"that time overlaps {b.word('record')} {clash} on the same {b.word('item')}")
    record[b.f("record", "slot_date")], record[b.f("record", "slot_start")] = a["date"], a["start_time"]
    return {b.key("record"): a["@record"], "date": a["date"], "start_time": a["start_time"]}


SCHEDULE = Mechanism(
    name="schedule_conflict",
    rule="two records of one item never overlap in time on the same day; a move into a taken time is refused",
    roles=("item", "record"),
    fields={"record": {"slot_date": FieldSpec(choices=["2025-07-07", "2025-07-08", "2025-07-09"]),
                       "slot_start": FieldSpec(), "slot_minutes": FieldSpec(choices=[30, 45, 60, 90])}},
    tools=(ToolDef("reschedule_{record}", "Move {a_record} to another date and start time; refused when it would "
                   "overlap another {record} of the same {item}.",
                   {"@record": Arg("key", "the {record} id", "record"), "date": Arg("date", "the new date"),
                    "start_time": Arg("time", "the new start time")}, _reschedule, writes=("record",)),),
    invariant=_sched_invariant, prepare=_sched_prepare,
    owns=("record.slot_date", "record.slot_start", "record.slot_minutes"),
    flows=(("reschedule_{record}",),),
    suits=("appointment", "session", "lesson", "meeting", "room", "court", "class", "visit", "studio",
           "clinic", "viewing", "tutor", "watering", "schedule", "climate", "run", "mission"),
)


# ---------------------------------------------------------------- opening_hours
def _hours_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "hours")
    for i in b.each(state, "item"):
        i[b.f("item", "opens_at")] = rng.choice(["07:00", "08:00", "09:00"])
        i[b.f("item", "closes_at")] = rng.choice(["16:00", "17:30", "19:00"])
    for r in b.each(state, "record"):
        r[b.f("record", "arrival_time")] = None


def _hours_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        t = r[b.f("record", "arrival_time")]
        item = b.peek(state, "item", r[b.ref("record", "item")])
        if t is not None and item is not None and not item[b.f("item", "opens_at")] <= t < item[
                b.f("item", "closes_at")]:
            return f"{key}: {t} is outside opening hours"
    return None


def _set_arrival(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    item = b.get(state, "item", record[b.ref("record", "item")])
    opens, closes = item[b.f("item", "opens_at")], item[b.f("item", "closes_at")]
    if not opens <= a["time"] < closes:
        raise Refusal(f"{b.word('item')} {record[b.ref('record', 'item')]} is open {opens} to {closes}")
    record[b.f("record", "arrival_time")] = a["time"]
    return {b.key("record"): a["@record"], "arrival_time": a["time"]}


HOURS = Mechanism(
    name="opening_hours",
    rule="an arrival time must fall inside the item's opening hours",
    roles=("item", "record"),
    fields={"item": {"opens_at": FieldSpec(), "closes_at": FieldSpec()}, "record": {"arrival_time": FieldSpec()}},
    tools=(
        ToolDef("set_{record}_arrival_time", "Set when {a_record} arrives; it must be inside its {item}'s opening "
                "hours.", {"@record": Arg("key", "the {record} id", "record"), "time": Arg("time", "arrival time")},
                _set_arrival, writes=("record",)),
        ToolDef("get_{item}_hours", "The opening hours of {a_item}.", {"@item": Arg("key", "the {item} id", "item")},
                lambda b, s, a: {k: b.must(s, "item", a["@item"]).get(b.f("item", k))
                                 for k in ("opens_at", "closes_at")}),
    ),
    invariant=_hours_invariant, prepare=_hours_prepare,
    owns=("record.arrival_time", "item.opens_at", "item.closes_at"),
    flows=(("get_{item}_hours", "set_{record}_arrival_time"),),
    suits=("store", "clinic", "restaurant", "pickup", "venue", "library", "gym", "museum", "office",
           "depot", "pharmacy", "parcel", "viewing", "station", "practitioner"),
)


# ---------------------------------------------------------------- change_cutoff
def _days(date: str) -> int:
    y, m, d = (int(x) for x in date.split("-"))
    return y * 372 + m * 31 + d  # order-preserving day count; the cut-off compares within one year


def _cutoff_invariant(b: Bound, state: State) -> str | None:
    for row in b.rows(state, "changes"):
        if _days(row["service_date"]) - _days(b.p("today")) < b.p("cutoff_days"):
            return f"change {row['change_id']} was made inside the cut-off"
    return None


def _change_note(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    date = str(record[b.f("record", "service_date")] or "")
    if not date:
        raise Refusal(f"{b.word('record')} {a['@record']} has no service date yet")
    if _days(date) - _days(b.p("today")) < b.p("cutoff_days"):
        raise Refusal(f"{b.word('record')} {a['@record']} is on {date}; changes close {b.p('cutoff_days')} days "
                      f"before (today is {b.p('today')})")
    record[b.f("record", "instructions")] = a["instructions"]
    b.insert(state, "changes", {b.key("record"): a["@record"], "service_date": date})
    return {b.key("record"): a["@record"], "instructions": a["instructions"]}


CUTOFF = Mechanism(
    name="change_cutoff",
    rule="a record's instructions can change only until the cut-off days before its service date",
    roles=("record",),
    fields={"record": {"service_date": FieldSpec(choices=["2025-07-02", "2025-07-03", "2025-07-09", "2025-07-20"]),
                       "instructions": FieldSpec(choices=["none", "leave at door", "call first"])}},
    tables=lambda b: b.log("changes", "change_id", "CH", {**b.refs("record"), "service_date": FieldSpec()}),
    params={"today": "2025-07-01", "cutoff_days": 3},
    tools=(ToolDef("change_{record}_instructions", "Change the instructions of {a_record}; allowed until "
                   "{cutoff_days} days before its service date (today is {today}).",
                   {"@record": Arg("key", "the {record} id", "record"), "instructions": Arg("text", "instructions")},
                   _change_note, writes=("record", "changes")),),
    invariant=_cutoff_invariant, owns=("record.service_date", "record.instructions", "changes.rows"),
    flows=(("change_{record}_instructions",),),
    suits=("delivery", "order", "catering", "shipment", "cleaning", "booking", "event", "service",
           "moving", "parcel", "refill", "pharmacy", "install", "rental", "watering", "reservation"),
)

MECHANISMS = (STATE_MACHINE, APPROVAL, DEPENDENCIES, EXPIRY, CHECK_IN, ESCALATION, LEAST_LOADED, SCHEDULE, HOURS,
              CUTOFF)
