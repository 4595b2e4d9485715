"""Mechanisms over money: totals from lines, discounts and tax, balances and transfers, points, refunds,
installments, tiers, coupons, idempotent payments, budgets and currency conversion."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef, money, seeded
from envgym.world.spec import FieldSpec

PRICE = FieldSpec(type="number", min=5, max=200, decimals=2)
AMOUNT = FieldSpec(type="number", min=20, max=500, decimals=2)


def _key(b: Bound, slot: str, a: dict[str, Any]) -> str:
    return str(a[f"@{slot}"])


# ---------------------------------------------------------------- line_item_totals
def _lines_invariant(b: Bound, state: State) -> str | None:
    sums: defaultdict[str, float] = defaultdict(float)
    for line in b.rows(state, "lines"):
        if line["amount"] != money(line["quantity"] * line["unit_price"]):
            return f"line {line['line_item_id']}: amount {line['amount']} != quantity x unit price"
        sums[str(line[b.key("record")])] += line["amount"]
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "subtotal")] != money(sums[key]):
            return f"{b.word('record')} {key}: subtotal {r[b.f('record', 'subtotal')]} != lines {money(sums[key])}"
    return None


def _lines_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "subtotal")] = 0.0


def _add_line(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    item = b.usable(state, a["@item"])
    qty, price = int(a["quantity"]), item[b.f("item", "price")]
    line = b.insert(state, "lines", {b.key("record"): a["@record"], b.key("item"): a["@item"], "quantity": qty,
                                     "unit_price": price, "amount": money(qty * price)})
    record[b.f("record", "subtotal")] = money(record[b.f("record", "subtotal")] + line["amount"])
    return {"line_item_id": line["line_item_id"], "amount": line["amount"],
            b.f("record", "subtotal"): record[b.f("record", "subtotal")]}


def _remove_line(b: Bound, state: State, a: dict[str, Any]) -> Any:
    line = b.get(state, "lines", a["line_item_id"])
    record = b.get(state, "record", line[b.key("record")])
    b.delete(state, "lines", a["line_item_id"])
    record[b.f("record", "subtotal")] = money(record[b.f("record", "subtotal")] - line["amount"])
    return {"removed": a["line_item_id"], b.f("record", "subtotal"): record[b.f("record", "subtotal")]}


LINE_TOTALS = Mechanism(
    name="line_item_totals",
    rule="a record's subtotal is the sum of its lines, each quantity times the item's price when added",
    roles=("item", "record"),
    fields={"item": {"price": PRICE}, "record": {"subtotal": FieldSpec(type="number")}},
    tables=lambda b: b.log("lines", "line_item_id", "LI", {**b.refs("record", "item"), "quantity": FieldSpec(
        type="integer"), "unit_price": FieldSpec(type="number"), "amount": FieldSpec(type="number")}),
    params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("add_{item}_to_{record}", "Add a line of {a_item} to {a_record} at the {item}'s price; the "
                "{record}'s subtotal is recomputed. Returns the line id, its amount and the new subtotal.",
                {"@record": Arg("key", "the {record} id", "record"), "@item": Arg("key", "the {item} id", "item"),
                 "quantity": Arg("int", "how many", lo=1, hi=9)}, _add_line, writes=("lines", "record")),
        ToolDef("remove_{record}_line", "Remove a line from its {record}; the subtotal is recomputed.",
                {"line_item_id": Arg("key", "the line id", "lines")}, _remove_line, writes=("lines", "record")),
    ),
    invariant=_lines_invariant, prepare=_lines_prepare, owns=("record.subtotal", "lines.rows", "item.price"),
    flows=(("add_{item}_to_{record}", "remove_{record}_line"),),
    suits=("order", "invoice", "cart", "shop", "purchase", "quote", "print", "catering", "menu",
           "pharmacy", "refill", "repair", "maintenance", "work", "production", "shipment", "parcel"),
)


# ---------------------------------------------------------------- discount_and_tax
def _total(b: Bound, base: float, pct: int) -> float:
    return money(money(base * (100 - pct) / 100) * (1 + b.p("tax_rate")))


def _discount_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "discount_percent")] = 0
        r[b.f("record", "total")] = _total(b, r[b.f("record", "base_amount")], 0)


def _discount_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        pct = r[b.f("record", "discount_percent")]
        if not 0 <= pct <= b.p("max_discount") or r[b.f("record", "total")] != _total(
                b, r[b.f("record", "base_amount")], pct):
            return f"{b.word('record')} {key}: total {r[b.f('record', 'total')]} does not follow from its discount"
    return None


def _apply_discount(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    pct = int(a["percent"])
    if pct > b.p("max_discount"):
        raise Refusal(f"a discount may be at most {b.p('max_discount')} percent")
    record[b.f("record", "discount_percent")] = pct
    record[b.f("record", "total")] = _total(b, record[b.f("record", "base_amount")], pct)
    return {b.key("record"): a["@record"], "total": record[b.f("record", "total")]}


DISCOUNT_TAX = Mechanism(
    name="discount_and_tax",
    rule="total = base amount less the discount percent (at most the cap), plus tax at the world's rate, in cents",
    roles=("record",),
    fields={"record": {"base_amount": AMOUNT, "discount_percent": FieldSpec(type="integer"),
                       "total": FieldSpec(type="number")}},
    params={"tax_rate": 0.08, "max_discount": 30},
    tools=(
        ToolDef("apply_{record}_discount", "Set the discount percent of {a_record} (at most {max_discount}); its "
                "total becomes the base amount less the discount plus tax. Returns the new total.",
                {"@record": Arg("key", "the {record} id", "record"),
                 "percent": Arg("int", "discount percent", lo=0, hi=50)}, _apply_discount, writes=("record",)),
    ),
    invariant=_discount_invariant, prepare=_discount_prepare,
    owns=("record.discount_percent", "record.total", "record.base_amount"),
    flows=(("apply_{record}_discount",),),
    suits=("order", "invoice", "booking", "subscription", "rental", "purchase", "quote", "membership",
           "ticket", "license", "refill"),
)


# ---------------------------------------------------------------- balance_transfer
def _opening(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "opening_balance")] = p[b.f("party", "balance")]


def _transfer_invariant(b: Bound, state: State) -> str | None:
    net: defaultdict[str, float] = defaultdict(float)
    for t in b.rows(state, "transfers"):
        net[str(t["from_id"])] -= t["amount"]
        net[str(t["to_id"])] += t["amount"]
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        bal = p[b.f("party", "balance")]
        if bal < 0 or bal != money(p[b.f("party", "opening_balance")] + net[key]):
            return f"{b.word('party')} {key}: balance {bal} is not the opening balance plus its transfers"
    return None


def _transfer(b: Bound, state: State, a: dict[str, Any]) -> Any:
    src, dst = str(a["from_{party}_id"]), str(a["to_{party}_id"])
    amount = money(float(a["amount"]))
    if src == dst:
        raise Refusal("a transfer needs two different accounts")
    payer, payee = b.get(state, "party", src), b.get(state, "party", dst)
    bal = b.f("party", "balance")
    if amount > b.p("transfer_limit"):
        raise Refusal(f"one transfer may move at most {b.p('transfer_limit')}")
    if payer[bal] < amount:
        raise Refusal(f"{b.word('party')} {src} has {payer[bal]}; a transfer of {amount} would overdraw it")
    payer[bal], payee[bal] = money(payer[bal] - amount), money(payee[bal] + amount)
    made = b.insert(state, "transfers", {"from_id": src, "to_id": dst, "amount": amount})
    return {"transfer_id": made["transfer_id"], "from_balance": payer[bal], "to_balance": payee[bal]}


TRANSFER = Mechanism(
    name="balance_transfer",
    rule="a transfer moves an amount between two accounts up to a per-transfer limit and never overdraws the payer",
    roles=("party",),
    fields={"party": {"balance": FieldSpec(type="number", min=0, max=900, decimals=2),
                      "opening_balance": FieldSpec(type="number")}},
    tables=lambda b: b.log("transfers", "transfer_id", "TR", {"from_id": FieldSpec(), "to_id": FieldSpec(),
                                                              "amount": FieldSpec(type="number")}),
    params={"transfer_limit": 500},
    tools=(
        ToolDef("transfer_{party}_balance", "Move an amount from one {party}'s balance to another's (at most "
                "{transfer_limit} a transfer, never more than the payer has). Returns both new balances.",
                {"from_{party}_id": Arg("key", "the paying {party} id", "party"),
                 "to_{party}_id": Arg("key", "the receiving {party} id", "party"),
                 "amount": Arg("number", "the amount", lo=1, hi=600)}, _transfer, writes=("party", "transfers")),
    ),
    invariant=_transfer_invariant, prepare=_opening, owns=("party.balance", "transfers.rows"),
    flows=(("transfer_{party}_balance",),),
    suits=("bank", "wallet", "account", "finance", "payment", "credit", "budget", "team", "member", "club",
           "savings", "pot", "transfer", "customer", "captain"),
)


# ---------------------------------------------------------------- wallet_ledger (overdraft limit)
def _ledger_prepare(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "opening_credit")] = p[b.f("party", "credit")]


def _ledger_invariant(b: Bound, state: State) -> str | None:
    net: defaultdict[str, float] = defaultdict(float)
    for e in b.rows(state, "ledger"):
        net[str(e[b.key("party")])] += e["change"]
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        credit = p[b.f("party", "credit")]
        if credit < -b.p("overdraft") or credit != money(p[b.f("party", "opening_credit")] + net[key]):
            return f"{b.word('party')} {key}: credit {credit} breaks the ledger or the overdraft"
    return None


def _move(sign: int) -> Any:
    def run(b: Bound, state: State, a: dict[str, Any]) -> Any:
        party = b.get(state, "party", a["@party"])
        amount, credit = money(float(a["amount"])), b.f("party", "credit")
        if sign < 0 and party[credit] - amount < -b.p("overdraft"):
            raise Refusal(f"{b.word('party')} {a['@party']} has {party[credit]} and may go {b.p('overdraft')} "
                          f"below zero; {amount} is too much")
        party[credit] = money(party[credit] + sign * amount)
        made = b.insert(state, "ledger", {b.key("party"): a["@party"], "change": sign * amount})
        return {"entry_id": made["entry_id"], credit: party[credit]}
    return run


LEDGER = Mechanism(
    name="credit_ledger",
    rule="every credit change is a ledger entry; a withdrawal may take the credit at most the overdraft below zero",
    roles=("party",),
    fields={"party": {"credit": FieldSpec(type="number", min=0, max=300, decimals=2),
                      "opening_credit": FieldSpec(type="number")}},
    tables=lambda b: b.log("ledger", "entry_id", "LE", {**b.refs("party"), "change": FieldSpec(type="number")}),
    params={"overdraft": 50},
    tools=(
        ToolDef("add_{party}_credit", "Add credit to {a_party}'s account (a ledger entry). Returns the new credit.",
                {"@party": Arg("key", "the {party} id", "party"), "amount": Arg("number", "the amount", lo=1, hi=300)},
                _move(1), writes=("party", "ledger")),
        ToolDef("use_{party}_credit", "Take credit from {a_party}'s account; it may go at most {overdraft} below "
                "zero. Returns the new credit.",
                {"@party": Arg("key", "the {party} id", "party"), "amount": Arg("number", "the amount", lo=1, hi=400)},
                _move(-1), writes=("party", "ledger")),
    ),
    invariant=_ledger_invariant, prepare=_ledger_prepare, owns=("party.credit", "ledger.rows"),
    flows=(("add_{party}_credit", "use_{party}_credit"),),
    suits=("wallet", "account", "member", "prepaid", "credit", "cafeteria", "print", "laundry", "arcade",
           "savings", "pot", "employee", "app", "campaign", "hosting"),
)


# ---------------------------------------------------------------- loyalty_points
def _points_prepare(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "points")] = 0
    for r in b.each(state, "record"):
        r[b.f("record", "points_awarded")] = False


def _points_invariant(b: Bound, state: State) -> str | None:
    net: Counter[str] = Counter()
    for e in b.rows(state, "points_log"):
        net[str(e[b.key("party")])] += e["points"]
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if p[b.f("party", "points")] < 0 or p[b.f("party", "points")] != net[key]:
            return f"{b.word('party')} {key}: {p[b.f('party', 'points')]} points, log says {net[key]}"
    return None


def _earn(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "points_awarded")]:
        raise Refusal(f"{b.word('record')} {a['@record']} has already earned its points")
    owner = b.get(state, "party", record[b.ref("record", "party")])
    earned = int(record[b.f("record", "spend")] // b.p("per_point"))
    record[b.f("record", "points_awarded")] = True
    owner[b.f("party", "points")] += earned
    b.insert(state, "points_log", {b.key("party"): record[b.ref("record", "party")], "points": earned})
    return {"earned": earned, "points": owner[b.f("party", "points")]}


def _redeem(b: Bound, state: State, a: dict[str, Any]) -> Any:
    party = b.get(state, "party", a["@party"])
    pts = int(a["points"])
    if pts > party[b.f("party", "points")]:
        raise Refusal(f"{b.word('party')} {a['@party']} has {party[b.f('party', 'points')]} points")
    party[b.f("party", "points")] -= pts
    b.insert(state, "points_log", {b.key("party"): a["@party"], "points": -pts})
    return {"redeemed": pts, "points": party[b.f("party", "points")]}


POINTS = Mechanism(
    name="loyalty_points",
    rule="a record earns one point per whole unit of spend once; points are redeemed only up to the balance",
    roles=("party", "record"),
    fields={"party": {"points": FieldSpec(type="integer")}, "record": {"spend": AMOUNT, "points_awarded": FieldSpec(
        type="boolean")}},
    tables=lambda b: b.log("points_log", "points_entry_id", "PL", {**b.refs("party"), "points": FieldSpec(
        type="integer")}),
    params={"per_point": 10},
    tools=(
        ToolDef("award_{record}_points", "Credit the points {a_record} earns (one per {per_point} of spend) to "
                "its {party}, once. Returns the points earned and the new balance.",
                {"@record": Arg("key", "the {record} id", "record")}, _earn,
                writes=("party", "record", "points_log")),
        ToolDef("redeem_{party}_points", "Spend points of {a_party}; at most the points held.",
                {"@party": Arg("key", "the {party} id", "party"), "points": Arg("int", "points", lo=1, hi=60)},
                _redeem, writes=("party", "points_log")),
    ),
    invariant=_points_invariant, prepare=_points_prepare,
    owns=("party.points", "record.points_awarded", "points_log.rows", "record.spend"),
    flows=(("award_{record}_points", "redeem_{party}_points"),),
    suits=("shop", "store", "hotel", "airline", "restaurant", "cafe", "member", "loyalty", "retail",
           "travel", "concert", "fan", "pharmacy", "rental", "driver", "patient", "customer"),
)


# ---------------------------------------------------------------- refund_window
def _refund_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "refunded")] = 0.0


def _refund_invariant(b: Bound, state: State) -> str | None:
    got: defaultdict[str, float] = defaultdict(float)
    for x in b.rows(state, "refunds"):
        got[str(x[b.key("record")])] += x["amount"]
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        done = r[b.f("record", "refunded")]
        if done != money(got[key]) or done > r[b.f("record", "paid")]:
            return f"{b.word('record')} {key}: refunded {done} (refunds {got[key]}, paid {r[b.f('record', 'paid')]})"
    return None


def _refund(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    amount = money(float(a["amount"]))
    if str(record[b.f("record", "paid_on")]) < b.p("window_start"):
        raise Refusal(f"{b.word('record')} {a['@record']} was paid on {record[b.f('record', 'paid_on')]}; refunds "
                      f"are possible for payments from {b.p('window_start')} on")
    left = money(record[b.f("record", "paid")] - record[b.f("record", "refunded")])
    if amount > left:
        raise Refusal(f"at most {left} of {b.word('record')} {a['@record']} can still be refunded")
    record[b.f("record", "refunded")] = money(record[b.f("record", "refunded")] + amount)
    made = b.insert(state, "refunds", {b.key("record"): a["@record"], "amount": amount})
    return {"refund_id": made["refund_id"], "refunded": record[b.f("record", "refunded")]}


REFUNDS = Mechanism(
    name="refund_window",
    rule="a refund is possible only for payments inside the window and never beyond what was paid",
    roles=("record",),
    fields={"record": {"paid": AMOUNT, "paid_on": FieldSpec(choices=[f"2025-{m:02d}-{d:02d}" for m in (3, 5, 7, 9)
                                                                      for d in (4, 18)]),
                       "refunded": FieldSpec(type="number")}},
    tables=lambda b: b.log("refunds", "refund_id", "RF", {**b.refs("record"), "amount": FieldSpec(type="number")}),
    params={"window_start": "2025-06-01"},
    tools=(
        ToolDef("refund_{record}", "Refund part or all of what {a_record} paid; only payments made on or after "
                "{window_start}, and never more than is left. Returns the refund id and the total refunded.",
                {"@record": Arg("key", "the {record} id", "record"), "amount": Arg("number", "amount", lo=1, hi=600)},
                _refund, writes=("record", "refunds")),
    ),
    invariant=_refund_invariant, prepare=_refund_prepare,
    owns=("record.refunded", "record.paid", "refunds.rows", "record.paid_on"),
    flows=(("refund_{record}",),),
    suits=("order", "booking", "ticket", "purchase", "subscription", "payment", "class", "trip", "rental"),
)


# ---------------------------------------------------------------- installment_plan
def _plan_invariant(b: Bound, state: State) -> str | None:
    sums: defaultdict[str, float] = defaultdict(float)
    for i in b.rows(state, "installments"):
        sums[str(i[b.key("record")])] += i["amount"]
    for key, total in sums.items():
        r = b.peek(state, "record", key)
        if r is None or money(total) != r[b.f("record", "amount_due")]:
            return f"installments of {key} sum to {money(total)}, not the amount due"
    return None


def _plan(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if any(i[b.key("record")] == a["@record"] for i in b.rows(state, "installments")):
        raise Refusal(f"{b.word('record')} {a['@record']} already has a payment plan")
    n, cents = int(a["count"]), round(record[b.f("record", "amount_due")] * 100)
    parts = [cents // n + (1 if k < cents % n else 0) for k in range(n)]  # cents spread so the parts sum exactly
    made = [b.insert(state, "installments", {b.key("record"): a["@record"], "number": k + 1, "amount": c / 100,
                                             "paid": False}) for k, c in enumerate(parts)]
    return {"installments": [{"installment_id": m["installment_id"], "amount": m["amount"]} for m in made]}


def _pay_installment(b: Bound, state: State, a: dict[str, Any]) -> Any:
    inst = b.get(state, "installments", a["installment_id"])
    if inst["paid"]:
        raise Refusal(f"installment {a['installment_id']} is already paid")
    earlier = [i for i in b.rows(state, "installments") if i[b.key("record")] == inst[b.key("record")]
               and i["number"] < inst["number"] and not i["paid"]]
    if earlier:
        raise Refusal(f"installment {earlier[0]['installment_id']} comes first")
    inst["paid"] = True
    return {"installment_id": a["installment_id"], "paid": True}


INSTALLMENTS = Mechanism(
    name="installment_plan",
    rule="a plan splits the amount due into installments that sum to it to the cent; they are paid in order",
    roles=("record",),
    fields={"record": {"amount_due": AMOUNT}},
    tables=lambda b: b.log("installments", "installment_id", "IN", {**b.refs("record"), "number": FieldSpec(
        type="integer"), "amount": FieldSpec(type="number"), "paid": FieldSpec(type="boolean")}),
    tools=(
        ToolDef("split_{record}_into_installments", "Split the amount due of {a_record} into equal installments "
                "(to the cent); one plan per {record}. Returns the installments.",
                {"@record": Arg("key", "the {record} id", "record"), "count": Arg("int", "installments", lo=2, hi=6)},
                _plan, writes=("installments",)),
        ToolDef("pay_{record}_installment", "Mark an installment paid; earlier ones must be paid first.",
                {"installment_id": Arg("key", "the installment id", "installments")}, _pay_installment,
                writes=("installments",)),
    ),
    invariant=_plan_invariant, owns=("installments.rows", "record.amount_due"),
    flows=(("split_{record}_into_installments", "pay_{record}_installment"),),
    suits=("invoice", "tuition", "order", "loan", "membership", "course", "subscription", "repair",
           "purchase", "savings", "license", "rental", "equity", "contract", "property"),
)


# ---------------------------------------------------------------- tiered_pricing
def _tier_price(b: Bound, units: int) -> float:
    tiers = sorted(b.p("tiers"), reverse=True)
    rate = next((p for lo, p in tiers if units >= lo), tiers[-1][1])
    return money(units * rate)


def _tier_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "charge")] = _tier_price(b, r[b.f("record", "units")])


def _tier_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "charge")] != _tier_price(b, r[b.f("record", "units")]):
            return f"{b.word('record')} {key}: charge does not follow the tiers"
    return None


def _set_units(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    units = int(a["units"])
    record[b.f("record", "units")] = units
    record[b.f("record", "charge")] = _tier_price(b, units)
    return {b.key("record"): a["@record"], "units": units, "charge": record[b.f("record", "charge")]}


def _quote(b: Bound, state: State, a: dict[str, Any]) -> Any:
    return {"units": int(a["units"]), "charge": _tier_price(b, int(a["units"]))}


TIERS = Mechanism(
    name="tiered_pricing",
    rule="the charge is units times the unit rate of the highest tier the units reach",
    roles=("record",),
    fields={"record": {"units": FieldSpec(type="integer", min=1, max=60), "charge": FieldSpec(type="number")}},
    params={"tiers": [[1, 4.0], [10, 3.5], [25, 3.0], [50, 2.5]]},
    tools=(
        ToolDef("change_{record}_units", "Change the units of {a_record}; the charge follows the volume tiers "
                "(4.00 each, 3.50 from 10, 3.00 from 25, 2.50 from 50). Returns the new charge.",
                {"@record": Arg("key", "the {record} id", "record"), "units": Arg("int", "units", lo=1, hi=80)},
                _set_units, writes=("record",)),
        ToolDef("quote_{record}_units", "The charge for a number of units under the volume tiers (no change).",
                {"units": Arg("int", "units", lo=1, hi=80)}, _quote),
    ),
    invariant=_tier_invariant, prepare=_tier_prepare, owns=("record.units", "record.charge"),
    flows=(("quote_{record}_units", "change_{record}_units"),),
    suits=("print", "storage", "data", "cloud", "license", "seat", "bulk", "wholesale", "backup",
           "utility", "pipeline", "workstation", "saas", "hosting", "campaign"),
)


# ---------------------------------------------------------------- coupon_single_use
def _coupon_tables(b: Bound) -> Any:
    return {**b.log("coupons", "coupon_code", "CPN", {"percent": FieldSpec(type="integer", min=5, max=25),
                                                      "max_uses": FieldSpec(type="integer", min=1, max=3),
                                                      "uses": FieldSpec(value=0)}),
            **b.log("redemptions", "redemption_id", "RD", {**b.refs("party", "record"), "coupon_code": FieldSpec()})}


def _coupon_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "coupons")
    for _ in range(4):
        b.insert(state, "coupons", {"percent": rng.choice([5, 10, 15, 20]), "max_uses": rng.randint(1, 3), "uses": 0})
    for r in b.each(state, "record"):
        r[b.f("record", "coupon")] = None


def _coupon_invariant(b: Bound, state: State) -> str | None:
    uses: Counter[str] = Counter()
    pairs: set[tuple[str, str]] = set()
    for r in b.rows(state, "redemptions"):
        uses[r["coupon_code"]] += 1
        pair = (str(r[b.key("party")]), r["coupon_code"])
        if pair in pairs:
            return f"{pair} redeemed twice"
        pairs.add(pair)
    for code, c in state.table(b.ent("coupons")).peek_items():  # type: ignore[attr-defined]
        if c["uses"] != uses[code] or c["uses"] > c["max_uses"]:
            return f"coupon {code}: {c['uses']} uses of {c['max_uses']}"
    return None


def _redeem_coupon(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    coupon = b.get(state, "coupons", a["coupon_code"])
    owner = record[b.ref("record", "party")]
    if record[b.f("record", "coupon")] is not None:
        raise Refusal(f"{b.word('record')} {a['@record']} already has coupon {record[b.f('record', 'coupon')]}")
    if any(r[b.key("party")] == owner and r["coupon_code"] == a["coupon_code"] for r in b.rows(state, "redemptions")):
        raise Refusal(f"{b.word('party')} {owner} has already used coupon {a['coupon_code']}")
    if coupon["uses"] >= coupon["max_uses"]:
        raise Refusal(f"coupon {a['coupon_code']} has been used up")
    coupon["uses"] += 1
    record[b.f("record", "coupon")] = a["coupon_code"]
    b.insert(state, "redemptions", {b.key("party"): owner, b.key("record"): a["@record"],
                                    "coupon_code": a["coupon_code"]})
    return {b.key("record"): a["@record"], "coupon_code": a["coupon_code"], "percent": coupon["percent"]}


COUPONS = Mechanism(
    name="coupon_single_use",
    rule="a coupon is used at most its maximum number of times, once per customer and once per record",
    roles=("party", "record"),
    fields={"record": {"coupon": FieldSpec()}},
    tables=_coupon_tables,
    tools=(
        ToolDef("redeem_coupon_on_{record}", "Apply a coupon to {a_record}; each coupon works once per {party} "
                "and up to its maximum uses. Returns its percent.",
                {"@record": Arg("key", "the {record} id", "record"), "coupon_code": Arg("key", "the code", "coupons")},
                _redeem_coupon, writes=("coupons", "record", "redemptions")),
    ),
    invariant=_coupon_invariant, prepare=_coupon_prepare, owns=("coupons.rows", "redemptions.rows", "record.coupon"),
    flows=(("redeem_coupon_on_{record}",),),
    suits=("shop", "order", "store", "restaurant", "delivery", "booking", "ticket", "cart", "retail",
           "concert", "rental", "app", "campaign", "subscription", "pharmacy", "hosting"),
)


# ---------------------------------------------------------------- idempotent_payment
def _pay_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "paid_so_far")] = 0.0


def _pay_invariant(b: Bound, state: State) -> str | None:
    keys: set[str] = set()
    sums: defaultdict[str, float] = defaultdict(float)
    for p in b.rows(state, "payments"):
        if p["idempotency_key"] in keys:
            return f"payment key {p['idempotency_key']} charged twice"
        keys.add(p["idempotency_key"])
        sums[str(p[b.key("record")])] += p["amount"]
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "paid_so_far")] != money(sums[key]) or money(sums[key]) > r[b.f("record", "bill")]:
            return f"{b.word('record')} {key}: paid {r[b.f('record', 'paid_so_far')]}, payments {sums[key]}"
    return None


def _pay(b: Bound, state: State, a: dict[str, Any]) -> Any:
    earlier = next((p for p in b.rows(state, "payments") if p["idempotency_key"] == a["idempotency_key"]), None)
    if earlier is not None:  # a retried request: the first charge stands, nothing is charged again
        return {"payment_id": earlier["payment_id"], "amount": earlier["amount"], "repeated": True}
    record = b.get(state, "record", a["@record"])
    amount = money(float(a["amount"]))
    left = money(record[b.f("record", "bill")] - record[b.f("record", "paid_so_far")])
    if amount > left:
        raise Refusal(f"{b.word('record')} {a['@record']} has {left} left to pay")
    record[b.f("record", "paid_so_far")] = money(record[b.f("record", "paid_so_far")] + amount)
    made = b.insert(state, "payments", {b.key("record"): a["@record"], "amount": amount,
                                        "idempotency_key": a["idempotency_key"]})
    return {"payment_id": made["payment_id"], "amount": amount, "repeated": False}


PAYMENTS = Mechanism(
    name="idempotent_payment",
    rule="a payment with a key already used returns the first payment and charges nothing; payments never exceed "
         "the bill",
    roles=("record",),
    fields={"record": {"bill": AMOUNT, "paid_so_far": FieldSpec(type="number")}},
    tables=lambda b: b.log("payments", "payment_id", "PM", {**b.refs("record"), "amount": FieldSpec(type="number"),
                                                            "idempotency_key": FieldSpec()}),
    tools=(
        ToolDef("pay_{record}", "Pay part of {a_record}'s bill; a repeated idempotency key returns the first "
                "payment instead of charging again. Returns the payment id.",
                {"@record": Arg("key", "the {record} id", "record"), "amount": Arg("number", "amount", lo=1, hi=500),
                 "idempotency_key": Arg("text", "a key unique to this payment")}, _pay,
                writes=("record", "payments")),
    ),
    invariant=_pay_invariant, prepare=_pay_prepare, owns=("record.paid_so_far", "record.bill", "payments.rows"),
    flows=(("pay_{record}",),),
    suits=("invoice", "bill", "order", "payment", "utility", "tuition", "fee", "rent", "repair", "equity",
           "trader", "rental", "hosting", "certificate", "license", "ticket", "refill"),
)


# ---------------------------------------------------------------- budget_cap
def _budget_prepare(b: Bound, state: State) -> None:
    for p in b.each(state, "party"):
        p[b.f("party", "spent")] = 0.0


def _budget_invariant(b: Bound, state: State) -> str | None:
    sums: defaultdict[str, float] = defaultdict(float)
    for x in b.rows(state, "purchases"):
        sums[str(x[b.key("party")])] += x["cost"]
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if p[b.f("party", "spent")] != money(sums[key]) or p[b.f("party", "spent")] > p[b.f("party", "budget")]:
            return f"{b.word('party')} {key}: spent {p[b.f('party', 'spent')]} of {p[b.f('party', 'budget')]}"
    return None


def _purchase(b: Bound, state: State, a: dict[str, Any]) -> Any:
    party = b.get(state, "party", a["@party"])
    item = b.usable(state, a["@item"])
    cost = money(int(a["quantity"]) * item[b.f("item", "unit_cost")])
    if party[b.f("party", "spent")] + cost > party[b.f("party", "budget")]:
        raise Refusal(f"{cost} would take {b.word('party')} {a['@party']} over the budget of "
                      f"{party[b.f('party', 'budget')]} ({party[b.f('party', 'spent')]} spent)")
    party[b.f("party", "spent")] = money(party[b.f("party", "spent")] + cost)
    made = b.insert(state, "purchases", {b.key("party"): a["@party"], b.key("item"): a["@item"], "cost": cost})
    return {"purchase_id": made["purchase_id"], "cost": cost, "spent": party[b.f("party", "spent")]}


def _unpurchase(b: Bound, state: State, a: dict[str, Any]) -> Any:
    x = b.get(state, "purchases", a["purchase_id"])
    party = b.get(state, "party", x[b.key("party")])
    party[b.f("party", "spent")] = money(party[b.f("party", "spent")] - x["cost"])
    b.delete(state, "purchases", a["purchase_id"])
    return {"removed": a["purchase_id"], "spent": party[b.f("party", "spent")]}


BUDGET = Mechanism(
    name="budget_cap",
    rule="purchases of a party never add up to more than its budget; a cancelled purchase frees its cost",
    roles=("party", "item"),
    fields={"party": {"budget": FieldSpec(type="number", min=100, max=600, decimals=0),
                      "spent": FieldSpec(type="number")},
            "item": {"unit_cost": PRICE}},
    tables=lambda b: b.log("purchases", "purchase_id", "PU", {**b.refs("party", "item"), "cost": FieldSpec(
        type="number")}),
    params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("purchase_{item}", "Buy a quantity of {a_item} for {a_party}, charged against their budget; "
                "refused over budget. Returns the purchase id, its cost and the total spent.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item"),
                 "quantity": Arg("int", "how many", lo=1, hi=5)}, _purchase, writes=("party", "purchases")),
        ToolDef("cancel_{item}_purchase", "Cancel a purchase; its cost goes back to the budget.",
                {"purchase_id": Arg("key", "the purchase id", "purchases")}, _unpurchase,
                writes=("party", "purchases")),
    ),
    invariant=_budget_invariant, prepare=_budget_prepare,
    owns=("party.spent", "party.budget", "purchases.rows", "item.unit_cost"),
    flows=(("purchase_{item}", "cancel_{item}_purchase"),),
    suits=("team", "department", "project", "grant", "office", "procurement", "lab", "school", "employee",
           "campaign", "app", "maintenance", "machine", "production", "fleet"),
)


# ---------------------------------------------------------------- currency_conversion
def _fx_invariant(b: Bound, state: State) -> str | None:
    rates = b.p("rates")
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        cur = r.get(b.f("record", "billing_currency"))
        if cur is not None and r[b.f("record", "billed_amount")] != money(r[b.f("record", "price_usd")] * rates[cur]):
            return f"{b.word('record')} {key}: billed amount is not the price at the {cur} rate"
    return None


def _fx_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "billing_currency")] = None
        r[b.f("record", "billed_amount")] = None


def _convert(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    cur = a["currency"]
    record[b.f("record", "billing_currency")] = cur
    record[b.f("record", "billed_amount")] = money(record[b.f("record", "price_usd")] * b.p("rates")[cur])
    return {b.key("record"): a["@record"], "currency": cur, "billed_amount": record[b.f("record", "billed_amount")]}


FX = Mechanism(
    name="currency_conversion",
    rule="a record billed in another currency carries its USD price times that currency's fixed rate, in cents",
    roles=("record",),
    fields={"record": {"price_usd": AMOUNT, "billing_currency": FieldSpec(), "billed_amount": FieldSpec(
        type="number")}},
    params={"rates": {"USD": 1.0, "EUR": 0.92, "GBP": 0.79, "JPY": 151.4, "CAD": 1.36}},
    tools=(
        ToolDef("bill_{record}_in_currency", "Bill {a_record} in another currency at the fixed rate (EUR 0.92, GBP "
                "0.79, JPY 151.4, CAD 1.36 per USD). Returns the billed amount.",
                {"@record": Arg("key", "the {record} id", "record"),
                 "currency": Arg("enum", "currency", choices=("USD", "EUR", "GBP", "JPY", "CAD"))}, _convert,
                writes=("record",)),
    ),
    invariant=_fx_invariant, prepare=_fx_prepare,
    owns=("record.billing_currency", "record.billed_amount", "record.price_usd"),
    flows=(("bill_{record}_in_currency",),),
    suits=("travel", "hotel", "shipping", "import", "freight", "flight", "booking", "invoice", "tour",
           "export", "equity", "trader", "instrument", "parcel", "shipper", "rental", "hosting"),
)

MECHANISMS = (LINE_TOTALS, DISCOUNT_TAX, TRANSFER, LEDGER, POINTS, REFUNDS, INSTALLMENTS, TIERS, COUPONS, PAYMENTS,
              BUDGET, FX)
