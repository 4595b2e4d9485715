"""The field ontology and the entity pool: typed building blocks that domains are composed from and grown with.

Each builder takes the domain's RNG and returns fields of a kind (money with a currency, dates, times, durations,
quantities, enums, state machines, addresses, free text, lists). `POOL` holds entity types that the add-entity
operator attaches to a domain, each with its own fields and, where it has one, a workflow.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from synth.lexicon import CURRENCIES, NOTES, WORDS, a, words
from synth.model import FieldModel, Transition


def money(name: str, rng: random.Random, lo: float = 5, hi: float = 900) -> list[FieldModel]:
    currency = rng.choice(CURRENCIES)
    return [FieldModel(name=name, kind="money", lo=lo, hi=hi, unit=currency),
            FieldModel(name="currency", kind="currency", unit=currency)]


def date(name: str) -> FieldModel:
    return FieldModel(name=name, kind="date")


def time(name: str) -> FieldModel:
    return FieldModel(name=name, kind="time")


def duration(name: str, lo: int = 15, hi: int = 240) -> FieldModel:
    return FieldModel(name=name, kind="duration", lo=lo, hi=hi, unit="minutes")


def quantity(name: str, lo: int, hi: int, unit: str = "") -> FieldModel:
    return FieldModel(name=name, kind="quantity", lo=lo, hi=hi, unit=unit)


def enum(name: str, choices: list[str]) -> FieldModel:
    return FieldModel(name=name, kind="enum", choices=choices)


def state(choices: list[str]) -> FieldModel:
    return FieldModel(name="status", kind="state", choices=choices)


def text(name: str) -> FieldModel:
    return FieldModel(name=name, kind="text", choices=list(NOTES))


def tags(name: str, rng: random.Random) -> FieldModel:
    return FieldModel(name=name, kind="list", choices=sorted(rng.sample(WORDS, 6)))


def flow(*steps: tuple[str, list[str], str]) -> list[Transition]:
    return [Transition(verb=v, source=s, target=t) for v, s, t in steps]


Spec = tuple[list[FieldModel], list[Transition]]
Builder = Callable[[random.Random], Spec]

POOL: dict[str, Builder] = {
    "payment": lambda r: ([*money("amount", r), enum("method", ["card", "transfer", "voucher", "cash"]),
                           date("payment_date"), state(["pending", "settled", "refunded"])],
                          flow(("settle", ["pending"], "settled"), ("refund", ["settled"], "refunded"))),
    "invoice": lambda r: ([*money("total", r, 20, 5000), date("due_date"), state(["draft", "issued", "paid", "void"])],
                          flow(("issue", ["draft"], "issued"), ("void", ["draft", "issued"], "void"))),
    "shipment": lambda r: ([enum("carrier", ["postal", "courier", "freight", "drone"]), date("eta"),
                            quantity("parcels", 1, 12), state(["preparing", "in_transit", "delivered", "returned"])],
                           flow(("dispatch", ["preparing"], "in_transit"), ("return", ["delivered"], "returned"))),
    "appointment": lambda r: ([date("day"), time("start_time"), duration("length"),
                               state(["scheduled", "checked_in", "completed", "no_show"])],
                              flow(("check_in", ["scheduled"], "checked_in"),
                                   ("complete", ["checked_in"], "completed"))),
    "ticket": lambda r: ([text("subject"), enum("priority", ["low", "normal", "high", "urgent"]),
                          state(["open", "in_progress", "resolved", "closed"])],
                         flow(("resolve", ["open", "in_progress"], "resolved"), ("reopen", ["resolved"], "open"),
                              ("close", ["resolved"], "closed"))),
    "review": lambda r: ([quantity("rating", 1, 5, "stars"), text("comment"), date("post_date")], []),
    "delivery_address": lambda r: ([FieldModel(name="street", kind="address"), FieldModel(name="postcode",
                                                                                            kind="postcode"),
                                    enum("label", ["home", "work", "other"])], []),
    "document": lambda r: ([text("title"), quantity("pages", 1, 400), tags("tags", r),
                            state(["draft", "in_review", "approved", "archived"])],
                           flow(("approve", ["in_review"], "approved"),
                                ("archive", ["draft", "approved"], "archived"))),
    "reservation": lambda r: ([date("day"), time("slot"), quantity("party_size", 1, 12, "people"),
                               state(["requested", "confirmed", "seated", "cancelled"])],
                              flow(("confirm", ["requested"], "confirmed"),
                                   ("cancel", ["requested", "confirmed"], "cancelled"))),
    "refund_request": lambda r: ([*money("amount", r, 5, 500),
                                  enum("reason", ["damaged", "late", "wrong item", "duplicate charge"]),
                                  state(["submitted", "approved", "rejected"])],
                                 flow(("approve", ["submitted"], "approved"), ("reject", ["submitted"], "rejected"))),
    "membership": lambda r: ([enum("tier", ["bronze", "silver", "gold"]), date("renewal_date"),
                              *money("fee", r, 5, 120), state(["active", "paused", "lapsed"])],
                             flow(("pause", ["active"], "paused"), ("resume", ["paused"], "active"))),
    "voucher": lambda r: ([FieldModel(name="code", kind="code"), *money("value", r, 5, 200), date("expiry_date"),
                           state(["unused", "redeemed", "expired"])], flow(("redeem", ["unused"], "redeemed"))),
    "message": lambda r: ([text("body"), date("send_date"), enum("channel", ["email", "sms", "app"])], []),
    "work_order": lambda r: ([date("due_date"), duration("effort", 30, 480), enum("crew", ["north", "south", "east"]),
                              state(["todo", "doing", "done"])],
                             flow(("start", ["todo"], "doing"), ("finish", ["doing"], "done"))),
    "loyalty_card": lambda r: ([quantity("points", 0, 5000, "points"), enum("level", ["basic", "plus", "elite"])],
                               []),
    "claim": lambda r: ([*money("claimed", r, 50, 8000), date("filing_date"), text("summary"),
                         state(["filed", "assessing", "accepted", "denied"])],
                        flow(("assess", ["filed"], "assessing"), ("accept", ["assessing"], "accepted"),
                             ("deny", ["assessing"], "denied"))),
    "lesson": lambda r: ([date("day"), time("start_time"), duration("length", 30, 120),
                          enum("level", ["beginner", "intermediate", "advanced"])], []),
    "rental": lambda r: ([date("pickup_date"), quantity("days", 1, 30, "days"), *money("deposit", r, 20, 600),
                          state(["reserved", "out", "returned", "overdue"])],
                         flow(("hand_out", ["reserved"], "out"), ("check_return", ["out", "overdue"], "returned"))),
    "subscription_plan": lambda r: ([enum("cycle", ["monthly", "quarterly", "yearly"]), *money("price", r, 3, 300),
                                     date("start_date"), state(["trial", "active", "cancelled"])],
                                    flow(("activate", ["trial"], "active"),
                                         ("cancel", ["trial", "active"], "cancelled"))),
    "inspection": lambda r: ([date("visit_date"), time("arrival"), enum("outcome", ["pending", "pass", "fail"]),
                              text("remarks")], []),
}

# Where a pool entity makes sense, so that add-entity attaches only entities that belong (issue 38: "claims" in a
# tutoring service, "lessons" owned by "shipments"). An entity belongs to a domain when the domain's taxonomy
# category is one it lists (`FITS`; None: every category), and may hang under another owned entity only when that
# entity is one of its wholes (`PARTS`: a pool entity it is part of, or "record" for the domain's own records, the
# transactions every seed domain has). `entity_problem` applies both rules and says which one refused.
_SELLING = ("education_elearning", "financial_trading", "gaming_entertainment", "healthcare_medical",
            "iphone_android", "legal_compliance", "real_estate_property", "software_apps", "transportation_logistics",
            "website_control", "enterprise_business_intelligence")
FITS: dict[str, tuple[str, ...] | None] = {
    "payment": _SELLING,
    "invoice": (*_SELLING, "manufacturing_industrial_iot", "agriculture_environmental"),
    "shipment": ("transportation_logistics", "manufacturing_industrial_iot", "agriculture_environmental",
                 "healthcare_medical"),
    "appointment": ("healthcare_medical", "real_estate_property", "legal_compliance", "education_elearning",
                    "transportation_logistics", "agriculture_environmental", "smart_home"),
    "ticket": None,
    "review": ("gaming_entertainment", "education_elearning", "healthcare_medical", "real_estate_property",
               "software_apps", "iphone_android", "transportation_logistics", "website_control"),
    "delivery_address": ("transportation_logistics", "healthcare_medical", "gaming_entertainment",
                         "manufacturing_industrial_iot"),
    "document": ("legal_compliance", "real_estate_property", "healthcare_medical", "financial_trading",
                 "enterprise_business_intelligence", "education_elearning", "software_apps", "website_control",
                 "desktop_systems", "manufacturing_industrial_iot"),
    "reservation": ("gaming_entertainment", "transportation_logistics", "real_estate_property",
                    "education_elearning"),
    "refund_request": ("gaming_entertainment", "education_elearning", "healthcare_medical", "software_apps",
                       "transportation_logistics", "website_control", "iphone_android", "financial_trading"),
    "membership": ("gaming_entertainment", "education_elearning", "healthcare_medical", "software_apps",
                   "website_control", "financial_trading", "transportation_logistics"),
    "voucher": ("gaming_entertainment", "education_elearning", "transportation_logistics", "iphone_android",
                "software_apps", "website_control"),
    "message": None,
    "work_order": ("manufacturing_industrial_iot", "real_estate_property", "agriculture_environmental",
                   "robot_control", "smart_home", "transportation_logistics", "desktop_systems"),
    "loyalty_card": ("gaming_entertainment", "transportation_logistics", "healthcare_medical"),
    "claim": ("healthcare_medical", "legal_compliance", "transportation_logistics", "real_estate_property",
              "financial_trading"),
    "lesson": ("education_elearning", "gaming_entertainment"),
    "rental": ("transportation_logistics", "real_estate_property", "gaming_entertainment",
               "agriculture_environmental", "manufacturing_industrial_iot"),
    "subscription_plan": ("software_apps", "enterprise_business_intelligence", "website_control", "iphone_android",
                          "gaming_entertainment", "education_elearning", "smart_home", "financial_trading"),
    "inspection": ("real_estate_property", "manufacturing_industrial_iot", "agriculture_environmental",
                   "transportation_logistics", "smart_home", "robot_control", "legal_compliance"),
}
PARTS: dict[str, tuple[str, ...]] = {
    "payment": ("record", "invoice", "reservation", "rental", "membership", "subscription_plan", "appointment",
                "lesson", "shipment", "work_order"),
    "invoice": ("record", "shipment", "work_order", "rental", "reservation", "appointment", "lesson",
                "subscription_plan", "membership", "inspection"),
    "shipment": ("invoice",),
    "appointment": ("claim", "work_order"),
    "ticket": ("record", "shipment", "payment", "invoice", "rental", "reservation", "subscription_plan",
               "membership", "work_order", "claim", "document"),
    "review": ("record", "appointment", "lesson", "rental", "reservation", "shipment", "work_order"),
    "delivery_address": ("shipment", "rental"),
    "document": ("record", "claim", "ticket", "work_order", "inspection", "invoice", "rental", "appointment"),
    "reservation": ("membership",),
    "refund_request": ("record", "payment", "invoice", "reservation", "rental", "shipment", "subscription_plan",
                       "membership", "lesson", "appointment"),
    "membership": (),
    "voucher": ("membership", "loyalty_card", "refund_request", "reservation"),
    "message": ("record", "ticket", "claim", "appointment", "reservation", "shipment", "work_order", "rental",
                "lesson", "document", "invoice", "inspection"),
    "work_order": ("ticket", "inspection", "claim"),
    "loyalty_card": ("membership",),
    "claim": ("shipment", "rental", "payment", "invoice", "inspection", "appointment", "reservation"),
    "lesson": ("membership", "subscription_plan", "reservation"),
    "rental": ("reservation", "membership"),
    "subscription_plan": ("membership",),
    "inspection": ("work_order", "rental", "claim", "shipment"),
}


def entity_problem(name: str, category: str, parent: str | None = None, parent_is_record: bool = False
                   ) -> str | None:
    """Why the pool entity `name` does not belong in a domain of `category` under the owned entity `parent` (None:
    owned by the account alone; `parent_is_record`: the parent is the domain's own record type, whatever its name);
    None when it belongs."""
    fits = FITS[name]
    if fits is not None and category not in fits:
        return f"{a(words(name))} does not belong in {words(category)}"
    if parent is not None and ("record" if parent_is_record or parent not in POOL else parent) not in PARTS[name]:
        return f"{a(words(name))} cannot be part of {a(words(parent))}"
    return None


LINKS = ["assignment", "allocation", "pairing", "line_item", "placement", "selection", "attachment", "coverage"]
WORKFLOWS = [
    (["new", "active", "on_hold", "closed"], [("activate", ["new"], "active"), ("hold", ["active"], "on_hold"),
                                             ("release", ["on_hold"], "active"),
                                             ("close", ["new", "active", "on_hold"], "closed")]),
    (["pending", "approved", "rejected"], [("approve", ["pending"], "approved"), ("reject", ["pending"], "rejected")]),
    (["queued", "running", "finished", "failed"], [("run", ["queued"], "running"), ("finish", ["running"], "finished"),
                                                   ("retry", ["failed"], "queued")]),
    (["draft", "published", "withdrawn"], [("publish", ["draft"], "published"),
                                           ("withdraw", ["published"], "withdrawn")]),
]
EXTRA_FIELDS: list[Callable[[random.Random], list[FieldModel]]] = [
    lambda r: [date("review_date")],
    lambda r: [text("note")],
    lambda r: [tags("labels", r)],
    lambda r: [enum("channel", ["web", "phone", "store", "partner"])],
    lambda r: [duration("lead_time", 10, 600)],
    lambda r: [quantity("priority_rank", 1, 9)],
    lambda r: [*money("fee", r, 1, 150)],
    lambda r: [time("preferred_time")],
    lambda r: [FieldModel(name="reference", kind="code")],
    lambda r: [enum("region", ["north", "south", "east", "west", "central"])],
]
