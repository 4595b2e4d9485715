"""Mechanisms over quantities that bookings take and cancellations give back: capacity, stock, waitlists, seats,
holds."""

from __future__ import annotations

from collections import Counter
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef
from envgym.world.spec import EntitySpec, FieldSpec

RECORD_STATES = {"open_states": ["open", "confirmed"], "closed_state": "cancelled"}


def is_open(b: Bound, record: dict[str, Any]) -> bool:
    return record.get(b.f("record", "status")) in b.p("open_states")


def open_units(b: Bound, state: State, qty_field: str) -> Counter[str]:
    """item key -> the quantity its open records hold."""
    held: Counter[str] = Counter()
    for r in b.rows(state, "record"):
        if is_open(b, r):
            held[str(r.get(b.ref("record", "item")))] += int(r.get(qty_field) or 0)
    return held


# ---------------------------------------------------------------- capacity_booking
def _cap_prepare(b: Bound, state: State) -> None:
    held = open_units(b, state, b.f("record", "quantity"))
    cap, left = b.f("item", "capacity"), b.f("item", "available")
    for key in list(state.table(b.ent("item"))):
        item = b.get(state, "item", key)
        item[cap] = max(int(item.get(cap) or 0), held[key])
        item[left] = item[cap] - held[key]


def _cap_invariant(b: Bound, state: State) -> str | None:
    held = open_units(b, state, b.f("record", "quantity"))
    cap, left = b.f("item", "capacity"), b.f("item", "available")
    for key, item in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        if item[left] != item[cap] - held[key] or item[left] < 0:
            return f"{b.word('item')} {key}: {left}={item[left]} but {cap}={item[cap]} and {held[key]} held"
    return None


def _book(b: Bound, state: State, a: dict[str, Any]) -> Any:
    b.get(state, "party", a["@party"])
    item = b.usable(state, a["@item"])
    left, qty = b.f("item", "available"), int(a["quantity"])
    if item[left] < qty:
        raise Refusal(f"{b.word('item')} {a['@item']} has only {item[left]} left; {qty} asked")
    item[left] -= qty
    made = b.insert(state, "record", {b.ref("record", "party"): a["@party"], b.ref("record", "item"): a["@item"],
                                      b.f("record", "quantity"): qty,
                                      b.f("record", "status"): b.p("open_states")[0]})
    return {b.key("record"): made[b.key("record")], left: item[left]}


def _release(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if not is_open(b, record):
        raise Refusal(f"{b.word('record')} {a['@record']} is {record[b.f('record', 'status')]}; only "
                      f"{' or '.join(b.p('open_states'))} ones can be cancelled")
    record[b.f("record", "status")] = b.p("closed_state")
    item = b.get(state, "item", record[b.ref("record", "item")])
    item[b.f("item", "available")] += int(record[b.f("record", "quantity")])
    return {b.key("record"): a["@record"], "status": b.p("closed_state"),
            b.f("item", "available"): item[b.f("item", "available")]}


def _availability(b: Bound, state: State, a: dict[str, Any]) -> Any:
    item = b.peek(state, "item", a["@item"])
    if item is None:
        raise Refusal(f"no {b.word('item')} with id {a['@item']}", "not_found")
    return {b.key("item"): a["@item"], b.f("item", "capacity"): item[b.f("item", "capacity")],
            b.f("item", "available"): item[b.f("item", "available")]}


CAPACITY = Mechanism(
    name="capacity_booking",
    rule="a booking takes its quantity from the item's capacity and a cancellation gives it back; a booking "
         "larger than what is left, or of an item in a blocking state, is refused",
    roles=("party", "item", "record"),
    fields={"item": {"capacity": FieldSpec(type="integer", min=4, max=12), "available": FieldSpec(type="integer")}},
    params={**RECORD_STATES, "blocked_states": ["blocked"]},
    tools=(
        ToolDef("book_{item}", "Book {item} for {a_party}: takes the quantity from what is left and creates "
                "{a_record}; refused when fewer are left or the {item} is {blocked}. Returns the new {record} id and how many are left.",
                {"@party": Arg("key", "the {party} id", role="party"), "@item": Arg("key", "the {item} id", "item"),
                 "quantity": Arg("int", "how many to book", lo=1, hi=4)}, _book, writes=("item", "record")),
        ToolDef("cancel_{record}", "Cancel {a_record} and give its quantity back to the {item}; only open ones "
                "can be cancelled. Returns how many are left.",
                {"@record": Arg("key", "the {record} id", "record")}, _release, writes=("item", "record"),
                reaches="closed_state"),
        ToolDef("check_{item}_availability", "How many of {a_item}'s capacity are left.",
                {"@item": Arg("key", "the {item} id", "item")}, _availability),
    ),
    invariant=_cap_invariant, prepare=_cap_prepare,
    owns=("item.available", "item.capacity", "record.rows", "record.status", "record.quantity"),
    flows=(("check_{item}_availability", "book_{item}"), ("book_{item}", "cancel_{record}")),
    suits=("booking", "session", "class", "section", "event", "tour", "slot", "visit", "room", "ticket",
           "course", "tournament", "registration", "viewing", "appointment", "concert", "reservation",
           "tutor", "rental", "zone", "watering"),
)


# ---------------------------------------------------------------- stock_order (all-or-nothing lines)
def _stock_tables(b: Bound) -> dict[str, EntitySpec]:
    return {b.ent("stock_orders"): EntitySpec(key=f"{b.one('party')}_order_id", prefix="SO", count=0, fields={
                f"{b.one('party')}_order_id": FieldSpec(), b.key("party"): FieldSpec(ref=b.ent("party")),
                "status": FieldSpec(value="placed")}),
            b.ent("order_lines"): EntitySpec(key="line_id", prefix="OL", count=0, fields={
                "line_id": FieldSpec(), f"{b.one('party')}_order_id": FieldSpec(), b.key("item"): FieldSpec(
                    ref=b.ent("item")), "quantity": FieldSpec(type="integer")})}


def _stock_prepare(b: Bound, state: State) -> None:
    for key in list(state.table(b.ent("item"))):
        item = b.get(state, "item", key)
        item[b.f("item", "on_hand")] = int(item.get(b.f("item", "stock_total")) or 0)


def _reserved(b: Bound, state: State) -> Counter[str]:
    order_key = f"{b.one('party')}_order_id"
    placed = {o[order_key] for o in b.rows(state, "stock_orders") if o["status"] == "placed"}
    out: Counter[str] = Counter()
    for line in b.rows(state, "order_lines"):
        if line[order_key] in placed:
            out[str(line[b.key("item")])] += line["quantity"]
    return out


def _stock_invariant(b: Bound, state: State) -> str | None:
    out = _reserved(b, state)
    for key, item in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        hand, total = item[b.f("item", "on_hand")], item[b.f("item", "stock_total")]
        if hand < 0 or hand + out[key] != total:
            return f"{b.word('item')} {key}: on hand {hand} + reserved {out[key]} != stock {total}"
    return None


def _place(b: Bound, state: State, a: dict[str, Any]) -> Any:
    b.get(state, "party", a["@party"])
    want: Counter[str] = Counter()
    for line in a["lines"]:
        want[str(line[b.key("item")])] += int(line["quantity"])
    hand = b.f("item", "on_hand")
    for key, qty in sorted(want.items()):  # every line is checked before any stock moves: all or nothing
        item = b.usable(state, key)
        if item[hand] < qty:
            raise Refusal(f"{b.word('item')} {key} has {item[hand]} in stock; {qty} asked; nothing was ordered")
    order_key = f"{b.one('party')}_order_id"
    order = b.insert(state, "stock_orders", {b.key("party"): a["@party"], "status": "placed"})
    for key, qty in sorted(want.items()):
        b.get(state, "item", key)[hand] -= qty
        b.insert(state, "order_lines", {order_key: order[order_key], b.key("item"): key, "quantity": qty})
    return {order_key: order[order_key], "lines": len(want)}


def _return_order(b: Bound, state: State, a: dict[str, Any]) -> Any:
    order_key = f"{b.one('party')}_order_id"
    order = b.get(state, "stock_orders", a["order_id"])
    if order["status"] != "placed":
        raise Refusal(f"order {a['order_id']} is already {order['status']}")
    order["status"] = "returned"
    for line in list(b.rows(state, "order_lines")):
        if line[order_key] == a["order_id"]:
            b.get(state, "item", line[b.key("item")])[b.f("item", "on_hand")] += line["quantity"]
    return {order_key: a["order_id"], "status": "returned"}


STOCK = Mechanism(
    name="stock_order",
    rule="an order of several lines takes stock for every line or for none; a return puts every line back",
    roles=("party", "item"),
    fields={"item": {"stock_total": FieldSpec(type="integer", min=3, max=30), "on_hand": FieldSpec(type="integer")}},
    tables=_stock_tables, params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("order_{item}_stock", "Order several {item} lines for {a_party} at once; every line must be in "
                "stock or nothing is ordered. Returns the order id.",
                {"@party": Arg("key", "the {party} id", "party"),
                 "lines": Arg("lines", "the lines: each a {item} id and a quantity", "item", lo=1, hi=5)},
                _place, writes=("item", "stock_orders", "order_lines")),
        ToolDef("return_{party}_order", "Return a whole order: every line goes back to stock.",
                {"order_id": Arg("key", "the order id", "stock_orders")}, _return_order,
                writes=("item", "stock_orders")),
    ),
    invariant=_stock_invariant, prepare=_stock_prepare, owns=("item.on_hand", "item.stock_total", "stock_orders.rows"),
    flows=(("order_{item}_stock", "return_{party}_order"),),
    suits=("shop", "store", "inventory", "order", "supply", "warehouse", "parts", "product", "print",
           "equipment", "pharmacy", "medication", "refill", "robot", "production", "batch", "device",
           "phone"),
)


# ---------------------------------------------------------------- waitlist
def _signup_tables(b: Bound) -> dict[str, EntitySpec]:
    return {b.ent("signups"): EntitySpec(key="signup_id", prefix="SU", count=0, fields={
        "signup_id": FieldSpec(), b.key("party"): FieldSpec(ref=b.ent("party")),
        b.key("item"): FieldSpec(ref=b.ent("item")), "state": FieldSpec(value="enrolled"),
        "position": FieldSpec(type="integer")})}


def _wait_invariant(b: Bound, state: State) -> str | None:
    places = b.f("item", "places")
    enrolled: Counter[str] = Counter()
    waiting: Counter[str] = Counter()
    for s in b.rows(state, "signups"):
        (enrolled if s["state"] == "enrolled" else waiting if s["state"] == "waitlisted" else Counter())[
            str(s[b.key("item")])] += 1
    for key, item in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        if enrolled[key] > item[places] or (waiting[key] and enrolled[key] < item[places]):
            return f"{b.word('item')} {key}: {enrolled[key]} enrolled of {item[places]} with {waiting[key]} waiting"
    return None


def _join(b: Bound, state: State, a: dict[str, Any]) -> Any:
    b.get(state, "party", a["@party"])
    item = b.usable(state, a["@item"])
    rows = [s for s in b.rows(state, "signups") if s[b.key("item")] == a["@item"]]
    if any(s[b.key("party")] == a["@party"] and s["state"] != "withdrawn" for s in rows):
        raise Refusal(f"{b.word('party')} {a['@party']} is already signed up for {a['@item']}")
    enrolled = sum(s["state"] == "enrolled" for s in rows)
    status = "enrolled" if enrolled < item[b.f("item", "places")] else "waitlisted"
    made = b.insert(state, "signups", {b.key("party"): a["@party"], b.key("item"): a["@item"], "state": status,
                                       "position": len(rows) + 1})
    return {"signup_id": made["signup_id"], "state": status}


def _withdraw(b: Bound, state: State, a: dict[str, Any]) -> Any:
    signup = b.get(state, "signups", a["signup_id"])
    if signup["state"] == "withdrawn":
        raise Refusal(f"signup {a['signup_id']} is already withdrawn")
    was = signup["state"]
    signup["state"] = "withdrawn"
    promoted = None
    if was == "enrolled":  # the first one waiting takes the freed place
        waiting = sorted((s for s in b.rows(state, "signups") if s[b.key("item")] == signup[b.key("item")]
                          and s["state"] == "waitlisted"), key=lambda s: s["position"])
        if waiting:
            promoted = waiting[0]["signup_id"]
            b.get(state, "signups", promoted)["state"] = "enrolled"
    return {"signup_id": a["signup_id"], "state": "withdrawn", "promoted": promoted}


WAITLIST = Mechanism(
    name="waitlist",
    rule="a signup beyond the places joins the waitlist; a withdrawal of an enrolled signup promotes the first "
         "one waiting",
    roles=("party", "item"),
    fields={"item": {"places": FieldSpec(type="integer", min=1, max=3)}},
    tables=_signup_tables, params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("sign_up_for_{item}", "Sign {a_party} up for {a_item}: enrolled while places are free, else put "
                "on the waitlist. Returns the signup id and its state.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item")},
                _join, writes=("signups",)),
        ToolDef("withdraw_{item}_signup", "Withdraw a signup; a freed place goes to the first one waiting "
                "(returned as promoted).", {"signup_id": Arg("key", "the signup id", "signups")}, _withdraw,
                writes=("signups",)),
    ),
    invariant=_wait_invariant, owns=("signups.rows", "item.places"),
    flows=(("sign_up_for_{item}", "withdraw_{item}_signup"),),
    suits=("course", "class", "section", "event", "tour", "session", "workshop", "tutor", "trip",
           "tournament", "registration", "concert", "viewing", "property", "clinic"),
)


# ---------------------------------------------------------------- seat_assignment
def _seat_prepare(b: Bound, state: State) -> None:
    seat = b.f("record", "seat")
    for key in list(state.table(b.ent("record"))):
        b.get(state, "record", key)[seat] = None


def _seat_invariant(b: Bound, state: State) -> str | None:
    seat, count = b.f("record", "seat"), b.f("item", "seat_count")
    taken: set[tuple[str, int]] = set()
    for r in b.rows(state, "record"):
        if not r.get(seat):  # no seat (a record made by another mechanism starts at 0)
            continue
        item = b.peek(state, "item", r[b.ref("record", "item")])
        pair = (str(r[b.ref("record", "item")]), r[seat])
        if pair in taken or item is None or not 1 <= r[seat] <= item[count]:
            return f"seat {pair} is taken twice or out of range"
        taken.add(pair)
    return None


def _assign(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    item = b.get(state, "item", record[b.ref("record", "item")])
    seat = int(a["seat"])
    if seat > item[b.f("item", "seat_count")]:
        raise Refusal(f"{b.word('item')} {record[b.ref('record', 'item')]} has seats 1 to "
                      f"{item[b.f('item', 'seat_count')]}")
    if any(r.get(b.f("record", "seat")) == seat and r[b.ref("record", "item")] == record[b.ref("record", "item")]
           for r in b.rows(state, "record")):
        raise Refusal(f"seat {seat} is already taken")
    record[b.f("record", "seat")] = seat
    return {b.key("record"): a["@record"], "seat": seat}


def _unassign(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record.get(b.f("record", "seat")) is None:
        raise Refusal(f"{b.word('record')} {a['@record']} has no seat")
    record[b.f("record", "seat")] = None
    return {b.key("record"): a["@record"], "seat": None}


SEATS = Mechanism(
    name="seat_assignment",
    rule="a seat number is unique within its item and lies within the item's seat count",
    roles=("item", "record"),
    fields={"item": {"seat_count": FieldSpec(type="integer", min=4, max=8)}, "record": {"seat": FieldSpec(
        type="integer")}},
    tools=(
        ToolDef("assign_{record}_seat", "Give {a_record} a seat number of its {item}; refused when taken.",
                {"@record": Arg("key", "the {record} id", "record"), "seat": Arg("int", "the seat", lo=1, hi=8)},
                _assign, writes=("record",)),
        ToolDef("free_{record}_seat", "Free the seat of {a_record}.",
                {"@record": Arg("key", "the {record} id", "record")}, _unassign, writes=("record",)),
    ),
    invariant=_seat_invariant, prepare=_seat_prepare, owns=("record.seat",),
    flows=(("assign_{record}_seat", "free_{record}_seat"),),
    suits=("flight", "event", "ticket", "show", "concert", "class", "section", "bus", "train", "cinema",
           "tournament", "reservation", "course", "viewing"),
)


# ---------------------------------------------------------------- hold_then_confirm
def _hold_tables(b: Bound) -> dict[str, EntitySpec]:
    return {b.ent("holds"): EntitySpec(key="hold_id", prefix="HO", count=0, fields={
        "hold_id": FieldSpec(), b.key("party"): FieldSpec(ref=b.ent("party")),
        b.key("item"): FieldSpec(ref=b.ent("item")), "quantity": FieldSpec(type="integer"),
        "state": FieldSpec(value="held")})}


def _held(b: Bound, state: State) -> Counter[str]:
    out: Counter[str] = Counter()
    for h in b.rows(state, "holds"):
        if h["state"] == "held":
            out[str(h[b.key("item")])] += h["quantity"]
    return out


def _hold_prepare(b: Bound, state: State) -> None:
    for key in list(state.table(b.ent("item"))):
        b.get(state, "item", key)[b.f("item", "on_hold")] = 0


def _hold_invariant(b: Bound, state: State) -> str | None:
    held = _held(b, state)
    for key, item in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        if item[b.f("item", "on_hold")] != held[key] or held[key] > b.p("hold_limit"):
            return f"{b.word('item')} {key}: on hold {item[b.f('item', 'on_hold')]} but holds sum to {held[key]}"
    return None


def _hold(b: Bound, state: State, a: dict[str, Any]) -> Any:
    b.get(state, "party", a["@party"])
    item = b.usable(state, a["@item"])
    qty, field = int(a["quantity"]), b.f("item", "on_hold")
    if item[field] + qty > b.p("hold_limit"):
        raise Refusal(f"at most {b.p('hold_limit')} may be on hold for {a['@item']}; {item[field]} already are")
    item[field] += qty
    made = b.insert(state, "holds", {b.key("party"): a["@party"], b.key("item"): a["@item"], "quantity": qty,
                                     "state": "held"})
    return {"hold_id": made["hold_id"], field: item[field]}


def _settle(target: str) -> Any:
    def run(b: Bound, state: State, a: dict[str, Any]) -> Any:
        hold = b.get(state, "holds", a["hold_id"])
        if hold["state"] != "held":
            raise Refusal(f"hold {a['hold_id']} is {hold['state']}; only held ones can be {target}")
        hold["state"] = target
        b.get(state, "item", hold[b.key("item")])[b.f("item", "on_hold")] -= hold["quantity"]
        return {"hold_id": a["hold_id"], "state": target}
    return run


HOLDS = Mechanism(
    name="hold_then_confirm",
    rule="a hold reserves a quantity up to a per-item limit until it is confirmed or released; only held holds "
         "can be settled",
    roles=("party", "item"),
    fields={"item": {"on_hold": FieldSpec(type="integer")}},
    tables=_hold_tables, params={"hold_limit": 6, "blocked_states": ["blocked"]},
    tools=(
        ToolDef("hold_{item}", "Put a quantity of {a_item} on hold for {a_party} (at most {hold_limit} held per "
                "{item}). Returns the hold id.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item"),
                 "quantity": Arg("int", "how many", lo=1, hi=4)}, _hold, writes=("item", "holds")),
        ToolDef("confirm_{item}_hold", "Confirm a hold (it becomes confirmed); only held ones.",
                {"hold_id": Arg("key", "the hold id", "holds")}, _settle("confirmed"), writes=("item", "holds"),
                reaches="confirmed"),
        ToolDef("release_{item}_hold", "Release a hold (it becomes released); only held ones.",
                {"hold_id": Arg("key", "the hold id", "holds")}, _settle("released"), writes=("item", "holds"),
                reaches="released"),
    ),
    invariant=_hold_invariant, prepare=_hold_prepare, owns=("item.on_hold", "holds.rows"),
    flows=(("hold_{item}", "confirm_{item}_hold"), ("hold_{item}", "release_{item}_hold")),
    suits=("room", "hotel", "rental", "vehicle", "table", "restaurant", "venue", "equipment", "desk",
           "listing", "property", "fleet", "concert", "domain", "site", "station"),
)

MECHANISMS = (CAPACITY, STOCK, WAITLIST, SEATS, HOLDS)
