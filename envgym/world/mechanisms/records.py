"""Mechanisms whose writes leave other records behind (audit rows, notifications, reviews with a derived rating)
and reads with a rule of their own (search with sorting and pages, a per-status report)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef
from envgym.world.spec import FieldSpec


# ---------------------------------------------------------------- audit_trail
def _audit_invariant(b: Bound, state: State) -> str | None:
    last: dict[str, Any] = {}
    for row in b.rows(state, "audit"):
        key = str(row[b.key("record")])
        if key in last and last[key] != row["before"]:
            return f"audit of {key}: a change starts from {row['before']}, the previous ended at {last[key]}"
        last[key] = row["after"]
    for key, after in last.items():
        r = b.peek(state, "record", key)
        if r is not None and r[b.f("record", "tag")] != after:
            return f"{key}: tag {r[b.f('record', 'tag')]} differs from its last audit row ({after})"
    return None


def _retag(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    before = record[b.f("record", "tag")]
    if before == a["tag"]:
        raise Refusal(f"{b.word('record')} {a['@record']} is already tagged {before}")
    record[b.f("record", "tag")] = a["tag"]
    made = b.insert(state, "audit", {b.key("record"): a["@record"], "field": "tag", "before": before,
                                     "after": a["tag"]})
    return {b.key("record"): a["@record"], "tag": a["tag"], "audit_id": made["audit_id"]}


AUDIT = Mechanism(
    name="audit_trail",
    rule="every tag change writes an audit row from the old value to the new, so the trail replays to the record",
    roles=("record",),
    fields={"record": {"tag": FieldSpec(choices=["standard", "priority", "review"])}},
    tables=lambda b: b.log("audit", "audit_id", "AU", {**b.refs("record"), "field": FieldSpec(),
                                                       "before": FieldSpec(), "after": FieldSpec()}),
    params={"tags": ["standard", "priority", "review", "hold"]},
    tools=(
        ToolDef("tag_{record}", "Change the tag of {a_record}; the change is written to the audit trail.",
                {"@record": Arg("key", "the {record} id", "record"),
                 "tag": Arg("enum", "the new tag", choices_param="tags")}, _retag, writes=("record", "audit")),
        ToolDef("get_{record}_audit_trail", "The audit rows of {a_record}, oldest first.",
                {"@record": Arg("key", "the {record} id", "record")},
                lambda b, s, a: b.must(s, "record", a["@record"]) and [
                    {"before": r["before"], "after": r["after"]} for r in b.rows(s, "audit")
                    if r[b.key("record")] == a["@record"]]),
    ),
    invariant=_audit_invariant, owns=("record.tag", "audit.rows"),
    flows=(("tag_{record}", "get_{record}_audit_trail"),),
)


# ---------------------------------------------------------------- notifications
def _notify_prepare(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "unread")] = 0


def _notify_invariant(b: Bound, state: State) -> str | None:
    unread = Counter(str(n[b.key("party")]) for n in b.rows(state, "notifications") if not n["read"])
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if p[b.f("party", "unread")] != unread[key]:
            return f"{key}: unread {p[b.f('party', 'unread')]} but {unread[key]} unread notifications"
    return None


def _post(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    owner = record[b.ref("record", "party")]
    msg = b.insert(state, "messages", {b.key("record"): a["@record"], "text": a["text"]})
    b.insert(state, "notifications", {b.key("party"): owner, "message_id": msg["message_id"], "read": False})
    party = b.get(state, "party", owner)
    party[b.f("party", "unread")] += 1
    return {"message_id": msg["message_id"], "notified": owner, "unread": party[b.f("party", "unread")]}


def _read_all(b: Bound, state: State, a: dict[str, Any]) -> Any:
    party = b.get(state, "party", a["@party"])
    keys = [k for k, n in state.table(b.ent("notifications")).peek_items()  # type: ignore[attr-defined]
            if n[b.key("party")] == a["@party"] and not n["read"]]
    for k in keys:
        b.get(state, "notifications", k)["read"] = True
    party[b.f("party", "unread")] = 0
    return {b.key("party"): a["@party"], "marked_read": len(keys)}


NOTIFY = Mechanism(
    name="notifications",
    rule="a message on a record notifies the record's party and raises their unread count; reading clears it",
    roles=("party", "record"),
    fields={"party": {"unread": FieldSpec(type="integer")}},
    tables=lambda b: {**b.log("messages", "message_id", "MS", {**b.refs("record"), "text": FieldSpec()}),
                      **b.log("notifications", "notification_id", "NT", {**b.refs("party"),
                                                                         "message_id": FieldSpec(),
                                                                         "read": FieldSpec(type="boolean")})},
    tools=(
        ToolDef("post_{record}_message", "Post a message on {a_record}; its {party} is notified. Returns the "
                "message id and their unread count.",
                {"@record": Arg("key", "the {record} id", "record"), "text": Arg("text", "the message")}, _post,
                writes=("messages", "notifications", "party")),
        ToolDef("mark_{party}_notifications_read", "Mark every unread notification of {a_party} read. Returns how "
                "many.", {"@party": Arg("key", "the {party} id", "party")}, _read_all,
                writes=("notifications", "party")),
    ),
    invariant=_notify_invariant, prepare=_notify_prepare,
    owns=("party.unread", "messages.rows", "notifications.rows"),
    flows=(("post_{record}_message", "mark_{party}_notifications_read"),),
)


# ---------------------------------------------------------------- reviews_rating
def _review_prepare(b: Bound, state: State) -> None:
    for i in b.each(state, "item"):
        i[b.f("item", "rating")] = None
        i[b.f("item", "review_count")] = 0


def _review_invariant(b: Bound, state: State) -> str | None:
    stars: defaultdict[str, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for r in b.rows(state, "reviews"):
        if r[b.key("record")] in seen:
            return f"{r[b.key('record')]} was reviewed twice"
        seen.add(r[b.key("record")])
        stars[str(r[b.key("item")])].append(r["stars"])
    for key, i in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        s = stars[key]
        want = round(sum(s) / len(s), 2) if s else None
        if i[b.f("item", "rating")] != want or i[b.f("item", "review_count")] != len(s):
            return f"{key}: rating {i[b.f('item', 'rating')]} over {len(s)} reviews should be {want}"
    return None


def _review(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    status = record.get(b.f("record", "status"))
    if status not in b.p("reviewable"):
        raise Refusal(f"{b.word('record')} {a['@record']} is {status}; only {' or '.join(b.p('reviewable'))} ones "
                      "can be reviewed")
    if any(r[b.key("record")] == a["@record"] for r in b.rows(state, "reviews")):
        raise Refusal(f"{b.word('record')} {a['@record']} has already been reviewed")
    item_key = record[b.ref("record", "item")]
    b.insert(state, "reviews", {b.key("record"): a["@record"], b.key("item"): item_key, "stars": int(a["stars"])})
    stars = [r["stars"] for r in b.rows(state, "reviews") if r[b.key("item")] == item_key]
    item = b.get(state, "item", item_key)
    item[b.f("item", "rating")], item[b.f("item", "review_count")] = round(sum(stars) / len(stars), 2), len(stars)
    return {b.key("item"): item_key, "rating": item[b.f("item", "rating")], "review_count": len(stars)}


REVIEWS = Mechanism(
    name="reviews_rating",
    rule="a record in a reviewable state gets at most one review, and the item's rating is the mean of its reviews",
    roles=("item", "record"),
    fields={"item": {"rating": FieldSpec(type="number"), "review_count": FieldSpec(type="integer")}},
    tables=lambda b: b.log("reviews", "review_id", "RW", {**b.refs("record", "item"), "stars": FieldSpec(
        type="integer")}),
    params={"reviewable": ["confirmed"]},
    tools=(ToolDef("review_{record}", "Rate the {item} of {a_record} from 1 to 5 stars, once per {record}; the "
                   "{item}'s rating becomes the mean. Returns the new rating.",
                   {"@record": Arg("key", "the {record} id", "record"), "stars": Arg("int", "stars", lo=1, hi=5)},
                   _review, writes=("reviews", "item")),),
    invariant=_review_invariant, prepare=_review_prepare,
    owns=("reviews.rows", "item.rating", "item.review_count"),
    flows=(("review_{record}",),),
    suits=("restaurant", "hotel", "tutor", "course", "product", "shop", "driver", "tour", "class",
           "doctor", "practitioner", "app", "concert", "vehicle", "property", "listing", "session",
           "appointment"),
)


# ---------------------------------------------------------------- search_sort_page
def _search(b: Bound, state: State, a: dict[str, Any]) -> Any:
    text = str(a.get("text") or "").lower()
    sort = b.f("item", "price")
    rows = [r for r in b.rows(state, "item") if text in str(r.get(b.f("item", "name"), "")).lower()]
    rows.sort(key=lambda r: (r[sort], str(r[b.key("item")])), reverse=a.get("order") == "desc")
    size, page = b.p("page_size"), int(a.get("page") or 1)
    chosen = rows[(page - 1) * size: page * size]
    return {"total": len(rows), "page": page, "pages": max(1, -(-len(rows) // size)),
            "results": [{b.key("item"): r[b.key("item")], "name": r.get(b.f("item", "name")), "price": r[sort]}
                        for r in chosen]}


SEARCH = Mechanism(
    name="search_sort_page",
    rule="a search filters by name text, sorts by price (ties by id) and returns fixed-size pages with the total",
    roles=("item",),
    fields={"item": {"price": FieldSpec(type="number", min=5, max=200, decimals=2)}},
    params={"page_size": 5},
    tools=(ToolDef("search_{item}s_by_price", "Find {item}s whose name contains the text, sorted by price "
                   "(ascending unless order is desc), {page_size} per page. Returns the total and the page.",
                   {"text": Arg("text", "text the name contains", optional=True),
                    "order": Arg("enum", "asc or desc", choices=("asc", "desc"), optional=True),
                    "page": Arg("int", "page number", lo=1, hi=20, optional=True)}, _search),),
    invariant=lambda b, s: None, owns=("item.price",),
    flows=(("search_{item}s_by_price",),),
)


# ---------------------------------------------------------------- status_report
def _report(b: Bound, state: State, a: dict[str, Any]) -> Any:
    if b.peek(state, "item", a["@item"]) is None:
        raise Refusal(f"no {b.word('item')} with id {a['@item']}", "not_found")
    rows = [r for r in b.rows(state, "record") if r[b.ref("record", "item")] == a["@item"]]
    by = Counter(str(r.get(b.f("record", "status"))) for r in rows)
    return {b.key("item"): a["@item"], "records": len(rows), "by_status": dict(sorted(by.items())),
            "quantity": sum(int(r.get(b.f("record", "quantity")) or 0) for r in rows)}


REPORT = Mechanism(
    name="status_report",
    rule="a report counts an item's records per status and sums their quantity, computed from the records at call "
         "time",
    roles=("item", "record"),
    tools=(ToolDef("report_on_{item}", "How many {record}s {a_item} has, per status, and their total quantity.",
                   {"@item": Arg("key", "the {item} id", "item")}, _report),),
    invariant=lambda b, s: None,
    flows=(("report_on_{item}",),),
)

MECHANISMS = (AUDIT, NOTIFY, REVIEWS, SEARCH, REPORT)
