"""Mechanisms over who may do what: roles and permissions, quotas, owner-only changes and ownership transfers."""

from __future__ import annotations

from collections import Counter
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef, seeded
from envgym.world.spec import FieldSpec


# ---------------------------------------------------------------- roles_permissions
def _roles_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "roles")
    roles = b.p("roles")
    for n, p in enumerate(b.each(state, "party")):
        p[b.f("party", "role")] = roles[0] if n == 0 else rng.choice(roles)  # the first party is an admin


def _roles_invariant(b: Bound, state: State) -> str | None:
    admins = sum(p[b.f("party", "role")] == b.p("roles")[0] for p in b.rows(state, "party"))
    if admins == 0:
        return "no admin is left"
    for row in b.rows(state, "role_changes"):
        if row["by_role"] != b.p("roles")[0]:
            return f"role change {row['role_change_id']} was made by a {row['by_role']}"
    return None


def _grant(b: Bound, state: State, a: dict[str, Any]) -> Any:
    actor = b.get(state, "party", a["actor_id"])
    target = b.get(state, "party", a["@party"])
    admin, field = b.p("roles")[0], b.f("party", "role")
    if actor[field] != admin:
        raise Refusal(f"only an {admin} may change roles; {a['actor_id']} is a {actor[field]}", "precondition")
    if target[field] == admin and a["role"] != admin and sum(p[field] == admin for p in b.rows(state, "party")) == 1:
        raise Refusal(f"{a['@party']} is the last {admin}")
    before = target[field]
    target[field] = a["role"]
    b.insert(state, "role_changes", {b.key("party"): a["@party"], "by": a["actor_id"], "by_role": admin,
                                     "before": before, "after": a["role"]})
    return {b.key("party"): a["@party"], "role": a["role"], "was": before}


ROLES = Mechanism(
    name="roles_permissions",
    rule="only an admin may change a role, and the last admin cannot be demoted; every change is logged with who "
         "made it",
    roles=("party",),
    fields={"party": {"role": FieldSpec()}},
    tables=lambda b: b.log("role_changes", "role_change_id", "RC", {**b.refs("party"), "by": FieldSpec(),
                                                                    "by_role": FieldSpec(), "before": FieldSpec(),
                                                                    "after": FieldSpec()}),
    params={"roles": ["admin", "editor", "viewer"]},
    tools=(
        ToolDef("set_{party}_role", "Give {a_party} a role (admin, editor or viewer); the actor must be an admin "
                "and the last admin stays one.",
                {"actor_id": Arg("key", "the id of the {party} making the change", "party"),
                 "@party": Arg("key", "the {party} whose role changes", "party"),
                 "role": Arg("enum", "the new role", choices_param="roles")}, _grant,
                writes=("party", "role_changes")),
        ToolDef("get_{party}_role", "The role of {a_party}.", {"@party": Arg("key", "the {party} id", "party")},
                lambda b, s, a: {"role": b.must(s, "party", a["@party"]).get(b.f("party", "role"))}),
    ),
    invariant=_roles_invariant, prepare=_roles_prepare, owns=("party.role", "role_changes.rows"),
    flows=(("get_{party}_role", "set_{party}_role"),),
    suits=("team", "workspace", "project", "org", "office", "company", "department", "wiki", "repository",
           "admin", "cms", "editor", "helpdesk", "domain", "hosting", "lab", "saas", "mobile", "device",
           "security"),
)


# ---------------------------------------------------------------- quota
def _quota_invariant(b: Bound, state: State) -> str | None:
    live = Counter(str(x[b.key("party")]) for x in b.rows(state, "requests") if x["state"] == "open")
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if live[key] > p[b.f("party", "quota")]:
            return f"{key} has {live[key]} open requests over a quota of {p[b.f('party', 'quota')]}"
    return None


def _request(b: Bound, state: State, a: dict[str, Any]) -> Any:
    party = b.get(state, "party", a["@party"])
    b.usable(state, a["@item"])
    live = sum(x[b.key("party")] == a["@party"] and x["state"] == "open" for x in b.rows(state, "requests"))
    if live >= party[b.f("party", "quota")]:
        raise Refusal(f"{b.word('party')} {a['@party']} has {live} open requests, the quota")
    made = b.insert(state, "requests", {b.key("party"): a["@party"], b.key("item"): a["@item"], "state": "open"})
    return {"request_id": made["request_id"], "open_requests": live + 1, "quota": party[b.f("party", "quota")]}


def _close(b: Bound, state: State, a: dict[str, Any]) -> Any:
    req = b.get(state, "requests", a["request_id"])
    if req["state"] != "open":
        raise Refusal(f"request {a['request_id']} is already closed")
    req["state"] = "closed"
    return {"request_id": a["request_id"], "state": "closed"}


QUOTA = Mechanism(
    name="quota",
    rule="a party holds at most its quota of open requests; closing one frees a place",
    roles=("party", "item"),
    fields={"party": {"quota": FieldSpec(type="integer", min=1, max=3)}},
    tables=lambda b: b.log("requests", "request_id", "RQ", {**b.refs("party", "item"), "state": FieldSpec()}),
    params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("request_{item}", "Open a request for {a_item} for {a_party}; refused at their quota of open "
                "requests. Returns the request id and the count.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item")},
                _request, writes=("requests",)),
        ToolDef("close_{item}_request", "Close a request (it frees a place in the quota).",
                {"request_id": Arg("key", "the request id", "requests")}, _close, writes=("requests",),
                reaches="closed"),
    ),
    invariant=_quota_invariant, owns=("requests.rows", "party.quota"),
    flows=(("request_{item}", "close_{item}_request"),),
)


# ---------------------------------------------------------------- owner_only_edit
def _owner_invariant(b: Bound, state: State) -> str | None:
    for row in b.rows(state, "label_edits"):
        r = b.peek(state, "record", row[b.key("record")])
        if r is not None and r[b.ref("record", "party")] != row["by"]:
            return f"{row[b.key('record')]} was labelled by {row['by']}, not its owner"
    return None


def _relabel(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    b.get(state, "party", a["@party"])
    if record[b.ref("record", "party")] != a["@party"]:
        raise Refusal(f"{b.word('record')} {a['@record']} belongs to another {b.word('party')}", "precondition")
    record[b.f("record", "nickname")] = a["nickname"]
    b.insert(state, "label_edits", {b.key("record"): a["@record"], "by": a["@party"]})
    return {b.key("record"): a["@record"], "nickname": a["nickname"]}


OWNER_ONLY = Mechanism(
    name="owner_only_edit",
    rule="only the party a record belongs to may rename it",
    roles=("party", "record"),
    fields={"record": {"nickname": FieldSpec(choices=["main", "backup", "spare"])}},
    tables=lambda b: b.log("label_edits", "label_edit_id", "LB", {**b.refs("record"), "by": FieldSpec()}),
    tools=(ToolDef("rename_{record}", "Give {a_record} a nickname; only the {party} it belongs to may.",
                   {"@party": Arg("key", "the {party} id", "party"), "@record": Arg("key", "the {record} id", "record"),
                    "nickname": Arg("text", "the nickname")}, _relabel, writes=("record", "label_edits")),),
    invariant=_owner_invariant, owns=("record.nickname", "label_edits.rows"),
    flows=(("rename_{record}",),),
)


# ---------------------------------------------------------------- ownership_transfer
def _handover_invariant(b: Bound, state: State) -> str | None:
    last: dict[str, str] = {}
    for row in b.rows(state, "handovers"):
        key = str(row[b.key("record")])
        if key in last and last[key] != row["from_id"]:
            return f"{key} was handed over by someone who no longer held it"
        last[key] = row["to_id"]
    for key, to in last.items():
        r = b.peek(state, "record", key)
        if r is not None and r[b.ref("record", "party")] != to:
            return f"{key} is held by {r[b.ref('record', 'party')]}, its last handover says {to}"
    return None


def _handover(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    b.get(state, "party", a["new_owner_id"])
    owner = record[b.ref("record", "party")]
    if owner == a["new_owner_id"]:
        raise Refusal(f"{a['new_owner_id']} already holds {a['@record']}")
    if b.p("open_states") and record.get(b.f("record", "status")) not in b.p("open_states"):
        raise Refusal(f"{b.word('record')} {a['@record']} is {record.get(b.f('record', 'status'))}; only open ones "
                      "can change hands")
    record[b.ref("record", "party")] = a["new_owner_id"]
    b.insert(state, "handovers", {b.key("record"): a["@record"], "from_id": owner, "to_id": a["new_owner_id"]})
    return {b.key("record"): a["@record"], "from": owner, "to": a["new_owner_id"]}


HANDOVER = Mechanism(
    name="ownership_transfer",
    rule="a record changes hands only while open, only to someone else, and each handover starts from its holder",
    roles=("party", "record"),
    tables=lambda b: b.log("handovers", "handover_id", "HV", {**b.refs("record"), "from_id": FieldSpec(),
                                                              "to_id": FieldSpec()}),
    params={"open_states": ["open", "confirmed"]},
    tools=(ToolDef("hand_over_{record}", "Transfer {a_record} to another {party}; only open ones.",
                   {"@record": Arg("key", "the {record} id", "record"),
                    "new_owner_id": Arg("key", "the {party} id receiving it", "party")}, _handover,
                   writes=("record", "handovers")),),
    invariant=_handover_invariant, owns=("record.party", "handovers.rows"),
    flows=(("hand_over_{record}",),),
    suits=("ticket", "pass", "license", "seat", "vehicle", "domain", "membership", "reservation", "asset",
           "booking", "concert", "rental", "access", "code", "order"),
)

MECHANISMS = (ROLES, QUOTA, OWNER_ONLY, HANDOVER)
