"""What a mechanism task's user wants, in plain words: one phrase per mechanism flow (envgym.world.mechanisms), the
names of the values the user gives for it, and the question each answerable result field answers.

A flow phrase is a verb phrase with the roles' words (`{record}`, `{item}`, `{items}`), the possessive `{my}` and
the subject `{i}` (filled "my"/"I" in the user's request, "your"/"you" in the instruction) and `{give}`, where the
values the user holds go: listed with their values in the instruction, named without them in the request (the user
gives them when asked). `ANSWERS[field]` contains the field's spoken name (`lexical`), so the request and the
instruction name the graded answer by the same words its label uses.
"""

from __future__ import annotations

import random

from synth.lexicon import lexical, plural

# (mechanism, flow) -> how a person asks for it. Every flow of the catalogue has one (tests/synth/test_intents.py).
FLOW_ACTS: dict[tuple[str, tuple[str, ...]], str] = {
    ("capacity_booking", ("check_{item}_availability", "book_{item}")):
        "check how much room is left on the {item} of {my} {record} and book more of it{give}",
    ("capacity_booking", ("book_{item}", "cancel_{record}")):
        "make another booking on the {item} of {my} {record}{give} and then cancel that new booking",
    ("stock_order", ("order_{item}_stock", "return_{party}_order")):
        "order some {items}{give} and then send the whole order back",
    ("waitlist", ("sign_up_for_{item}", "withdraw_{item}_signup")):
        "sign up for the {item} of {my} {record} and then withdraw that signup",
    ("seat_assignment", ("assign_{record}_seat", "free_{record}_seat")):
        "give {my} {record} a seat{give} and then free that seat again",
    ("hold_then_confirm", ("hold_{item}", "confirm_{item}_hold")):
        "put some of the {item} of {my} {record} on hold{give} and then confirm the hold",
    ("hold_then_confirm", ("hold_{item}", "release_{item}_hold")):
        "put some of the {item} of {my} {record} on hold{give} and then release the hold",
    ("line_item_totals", ("add_{item}_to_{record}", "remove_{record}_line")):
        "add a line for the {item} to {my} {record}{give} and then take that line off again",
    ("discount_and_tax", ("apply_{record}_discount",)):
        "have a discount applied to {my} {record}{give}",
    ("balance_transfer", ("transfer_{party}_balance",)):
        "move money from {my} balance to another account{give}",
    ("credit_ledger", ("add_{party}_credit", "use_{party}_credit")):
        "top up {my} account credit and then spend some of it{give}",
    ("loyalty_points", ("award_{record}_points", "redeem_{party}_points")):
        "collect the points {my} {record} earns and then redeem some of {my} points{give}",
    ("refund_window", ("refund_{record}",)):
        "get money back on {my} {record}{give}",
    ("installment_plan", ("split_{record}_into_installments", "pay_{record}_installment")):
        "split what {my} {record} costs into installments{give} and pay the first one",
    ("tiered_pricing", ("quote_{record}_units", "change_{record}_units")):
        "get a price for a number of units and then change the units on {my} {record}{give}",
    ("coupon_single_use", ("redeem_coupon_on_{record}",)):
        "use a coupon on {my} {record}{give}",
    ("idempotent_payment", ("pay_{record}",)):
        "pay part of the bill for {my} {record}{give}",
    ("budget_cap", ("purchase_{item}", "cancel_{item}_purchase")):
        "buy more of the {item} of {my} {record}{give} and then cancel that purchase",
    ("currency_conversion", ("bill_{record}_in_currency",)):
        "have {my} {record} billed in another currency{give}",
    ("state_machine", ("confirm_{record}", "get_{record}_history")):
        "confirm {my} {record} and then look at what has happened to it so far",
    ("approval_threshold", ("submit_{record}_for_approval", "approve_{record}")):
        "send {my} {record} for approval and have it approved{give}",
    ("dependencies", ("list_{record}_dependencies", "finish_{record}")):
        "check what {my} {record} is waiting on and then mark it done",
    ("expiry_renewal", ("renew_{record}", "use_{record}")):
        "renew {my} {record}{give} and then use it today",
    ("day_of_check_in", ("check_in_{record}",)):
        "check in for {my} {record}",
    ("escalation", ("escalate_{record}",)):
        "have {my} {record} escalated{give}",
    ("least_loaded_assignment", ("auto_assign_{record}", "unassign_{record}")):
        "have {my} {record} given to whoever has the least on their plate, and then taken off them again",
    ("schedule_conflict", ("reschedule_{record}",)):
        "move {my} {record} to another day and time{give}",
    ("opening_hours", ("get_{item}_hours", "set_{record}_arrival_time")):
        "check when the {item} of {my} {record} is open and set when {i} arrive{give}",
    ("change_cutoff", ("change_{record}_instructions",)):
        "change the instructions on {my} {record}{give}",
    ("cascade_delete", ("list_{record}_attachments", "delete_{record}")):
        "see which files are attached to {my} {record} and then delete it together with them",
    ("cascade_delete", ("attach_file_to_{record}", "delete_{record}")):
        "attach a file to {my} {record}{give} and then delete the {record} with everything attached to it",
    ("cascade_archive", ("archive_{item}", "unarchive_{record}")):
        "archive the {item} of {my} {record} and then bring {my} {record} back out of the archive",
    ("nested_address", ("change_{record}_address",)):
        "change the address on {my} {record}{give}",
    ("many_to_many_links", ("follow_{item}", "list_{party}_followed_{item}s")):
        "follow the {item} of {my} {record} and then see which {items} {i} follow",
    ("many_to_many_links", ("follow_{item}", "unfollow_{item}")):
        "follow the {item} of {my} {record} and then stop following it again",
    ("hierarchy_no_cycles", ("get_{item}_path", "move_{item}")):
        "see where the {item} of {my} {record} sits and move it under another one{give}",
    ("unique_handle", ("change_{party}_handle",)):
        "change {my} public handle{give}",
    ("soft_delete_restore", ("list_{party}_bin", "restore_{record}")):
        "check what is in {my} bin and get {my} {record} back out of it",
    ("soft_delete_restore", ("bin_{record}", "restore_{record}")):
        "put {my} {record} in the bin and then get it back out",
    ("optimistic_versioning", ("get_{record}_version", "edit_{record}_memo")):
        "check which version the memo on {my} {record} is at and then change the memo{give}",
    ("split_merge_lots", ("list_{party}_lots", "split_{item}_lot", "merge_{item}_lots")):
        "split some units off one of {my} lots{give} and merge them back",
    ("rollup_total", ("change_{record}_charge", "get_{party}_total_charged")):
        "change the charge on {my} {record}{give} and then look at what the account owes overall",
    ("roles_permissions", ("get_{party}_role", "set_{party}_role")):
        "check {my} role and then have it changed{give}",
    ("quota", ("request_{item}", "close_{item}_request")):
        "open a request for the {item} of {my} {record} and then close it again",
    ("owner_only_edit", ("rename_{record}",)):
        "give {my} {record} a nickname{give}",
    ("ownership_transfer", ("hand_over_{record}",)):
        "hand {my} {record} over to someone else{give}",
    ("audit_trail", ("tag_{record}", "get_{record}_audit_trail")):
        "change the tag on {my} {record}{give} and then see its audit trail",
    ("notifications", ("post_{record}_message", "mark_{party}_notifications_read")):
        "post a message on {my} {record}{give} and then mark all {my} notifications as read",
    ("reviews_rating", ("review_{record}",)):
        "rate the {item} of {my} {record}{give}",
    ("search_sort_page", ("search_{item}s_by_price",)):
        "look through the {items} by price{give}",
    ("status_report", ("report_on_{item}",)):
        "get a report on the {item} of {my} {record}",
}

# (the tool's first verb word, argument) -> the fact's key, as a person names that value; other arguments are
# `<argument>_to_<verb>` ("points to redeem", "amount to add": the verb keeps two values of one argument apart).
FACT_KEYS: dict[tuple[str, str], str] = {
    ("edit", "memo"): "new_memo", ("edit", "expected_version"): "expected_version",
    ("apply", "percent"): "discount_percent", ("split", "count"): "number_of_installments",
    ("redeem", "coupon_code"): "coupon_code", ("pay", "idempotency_key"): "payment_reference",
    ("reschedule", "date"): "new_date", ("reschedule", "start_time"): "new_start_time",
    ("set", "time"): "arrival_time", ("change", "instructions"): "new_instructions",
    ("attach", "file_name"): "file_name", ("change", "handle"): "new_handle", ("rename", "nickname"): "nickname",
    ("tag", "tag"): "new_tag", ("post", "text"): "message_text", ("review", "stars"): "stars",
    ("assign", "seat"): "seat_number", ("bill", "currency"): "currency", ("escalate", "reason"): "escalation_reason",
    ("set", "role"): "new_role", ("change", "amount"): "new_charge",
}

# Result field -> the question it answers; each contains the field's spoken name (`lexical`), which is the label
# the answer is graded under.
ANSWERS: dict[str, str] = {
    "available": "how many are still available", "total": "the new total", "subtotal": "the new subtotal",
    "from_balance": "what the from balance is now", "to_balance": "what the to balance is now",
    "credit": "how much credit is left", "points": "how many points are left",
    "earned": "how many points were earned", "refunded": "how much was refunded", "charge": "the new charge",
    "priority": "the new priority", "followers": "how many followers it has now",
    "unread": "how many unread notifications there are", "rating": "the new rating",
    "review_count": "the review count now", "assignee": "who the assignee is",
    "open_requests": "how many open requests there are", "cost": "what the cost came to",
    "spent": "how much has been spent", "billed_amount": "the billed amount",
    "attachments_deleted": "the number of attachments deleted with it",
    "records_archived": "the number of records archived", "version": "the new version number",
    "state": "the state it ends up in", "status": "the status it ends up in",
    "promoted": "who was promoted from the waitlist", "expires_on": "the date it now expires on",
    "total_charged": "the total charged to the account", "marked_read": "how many were marked read",
    "units": "the units it comes to", "lines": "how many lines there are now", "percent": "the percent applied",
}

# How the request opens and joins the answer; drawn by a generator of the task's own (see `flow_request`).
_WANTS = [("I'd like to {act}, and then I want to know {answer}", "you want to {act}, and to be told {answer}"),
          ("I need to {act}; please tell me {answer} afterwards", "you need to {act}; you want to be told {answer} "
                                                                  "afterwards"),
          ("could I {act}? Then I want to hear {answer}", "you want to {act}, and to be told {answer} then"),
          ("I want to {act}, and after that I need to be told {answer}", "you want to {act}, and to be told "
                                                                          "{answer} after that")]


def fact_key(verb: str, arg: str) -> str:
    """The key of the fact that holds the value of `arg` of the tool whose verb is `verb` (see `FACT_KEYS`)."""
    first = verb.split("_")[0]
    return FACT_KEYS.get((first, arg), f"{arg}_to_{first}")


def answer_phrase(field: str) -> str:
    """The question a result field answers, containing its spoken name (`lexical`)."""
    return ANSWERS.get(field, f"the {lexical(field)}")


def flow_request(mechanism: str, flow: tuple[str, ...], names: dict[str, str], held: list[tuple[str, object]],
                 field: str, seed: str) -> tuple[str, str]:
    """The instruction's clause and the user's request for one flow: `names` are the roles' words (`record`,
    `item`, `party`), `held` the (fact key, value) pairs the user gives, `field` the answered result field, and
    `seed` a string that picks the wording (its own generator: the task's draws are not moved). A flow without a
    phrase is a KeyError: the catalogue and FLOW_ACTS grow together."""
    act = FLOW_ACTS[(mechanism, flow)]
    roles = {**names, "items": plural(names.get("item", "item"))}
    spoken = [lexical(k) for k, _ in held]
    mine = act.format(**roles, my="my", i="I", give=f" (I have the {_join(spoken)} ready)" if held else "")
    yours = act.format(**roles, my="your", i="you", give=" ({})".format(", ".join(f"{lexical(k)} {v}" for k, v in held))
                       if held else "")
    request, instruction = random.Random(seed).choice(_WANTS)
    answer = answer_phrase(field)
    return instruction.format(act=yours, answer=answer), request.format(act=mine, answer=answer)


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
