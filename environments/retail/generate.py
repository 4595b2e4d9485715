"""Deterministic task generator for retail: `envgym generate retail` rewrites tasks.jsonl from the seeded world."""

from __future__ import annotations

import random

from envgym.world import Answer, Assertion, LoadedEnvironment, TaskSpec, ToolCall

SEED = 2024
NEW_ADDRESSES = ["12 Harbor View Road", "908 Larkspur Lane", "77 Quarry Street Apt 4", "5 Old Mill Court",
                 "1440 Sunset Terrace", "31 Birchwood Drive", "260 Canal Street Unit 9", "18 Juniper Way"]


def _call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=dict(arguments))


def generate_tasks(data: LoadedEnvironment) -> list[TaskSpec]:
    rng = random.Random(SEED)
    users = data.initial.tables["users"]
    orders = sorted(data.initial.tables["orders"].values(), key=lambda o: o["order_id"])
    products = sorted(data.initial.tables["products"].values(), key=lambda p: p["product_id"])
    by_status = {s: [o for o in orders if o["status"] == s] for s in ("pending", "processing", "delivered")}
    statuses = [str(c) for c in data.world.entities["orders"].fields["status"].choices or []]
    tasks: list[TaskSpec] = []

    def auth(user_id: str) -> ToolCall:
        return _call("find_user_id_by_email", email=users[user_id]["email"])

    for o in rng.sample(by_status["pending"], 8):
        u = users[o["user_id"]]
        reason = rng.choice(["no longer needed", "ordered by mistake"])
        tasks.append(TaskSpec(
            id=f"cancel_{o['order_id'][1:]}",
            instruction=f"Cancel your order {o['order_id']} because it is {reason}.",
            opening=f"Hi, I'd like to cancel my order {o['order_id']}.",
            user_known={"email": u["email"], "order_id": o["order_id"], "reason": reason},
            solution=[auth(u["user_id"]), _call("get_order_details", order_id=o["order_id"]),
                      _call("cancel_pending_order", order_id=o["order_id"], reason=reason)],
            final_reply=f"Your order {o['order_id']} is cancelled.",
            assertions=[Assertion(entity="orders", key=o["order_id"], field="status", value="cancelled")],
            rubric=["The agent authenticated the user by email before acting.",
                    "The agent confirmed the cancellation with the user before cancelling."],
            tags=["write", "cancel"],
        ))
    for o in rng.sample(by_status["pending"], 6):
        u = users[o["user_id"]]
        address = rng.choice(NEW_ADDRESSES)
        tasks.append(TaskSpec(
            id=f"readdress_{o['order_id'][1:]}",
            instruction=f"Have order {o['order_id']} shipped to {address} instead.",
            opening=f"Hello, can you change the shipping address of my order {o['order_id']}?",
            user_known={"email": u["email"], "order_id": o["order_id"], "new_address": address},
            solution=[auth(u["user_id"]), _call("get_order_details", order_id=o["order_id"]),
                      _call("modify_pending_order_address", order_id=o["order_id"], address=address)],
            final_reply=f"Order {o['order_id']} will now ship to {address}.",
            assertions=[Assertion(entity="orders", key=o["order_id"], field="address", value=address)],
            rubric=["The agent confirmed the new address with the user before changing it."],
            tags=["write", "address"],
        ))
    for o in rng.sample(by_status["delivered"], 6):
        u = users[o["user_id"]]
        tasks.append(TaskSpec(
            id=f"return_{o['order_id'][1:]}",
            instruction=f"Return your delivered order {o['order_id']}.",
            opening=f"I want to return order {o['order_id']}.",
            user_known={"email": u["email"], "order_id": o["order_id"]},
            solution=[auth(u["user_id"]), _call("get_order_details", order_id=o["order_id"]),
                      _call("return_delivered_order", order_id=o["order_id"])],
            final_reply=f"A return for order {o['order_id']} has been requested.",
            assertions=[Assertion(entity="orders", key=o["order_id"], field="status", value="return requested")],
            rubric=["The agent checked that the order was delivered before starting the return."],
            tags=["write", "return"],
        ))
    for o in rng.sample(by_status["processing"] + by_status["delivered"], 6):
        u = users[o["user_id"]]
        tasks.append(TaskSpec(
            id=f"status_{o['order_id'][1:]}",
            instruction=f"Find out the status and the total of your order {o['order_id']}, then have the address it "
                        "ships to made your default address.",
            opening=f"What is the status of my order {o['order_id']}, and how much did it cost? It goes to my new "
                    "home, so please make its shipping address my default address too.",
            user_known={"email": u["email"], "order_id": o["order_id"]},
            solution=[auth(u["user_id"]), _call("get_order_details", order_id=o["order_id"]),
                      _call("update_user_address", user_id=u["user_id"], address=o["address"])],
            final_reply=f"Order {o['order_id']} is {o['status']}; its total was {o['total']}. Its shipping address "
                        "is now your default address.",
            answers=[Answer(value=o["status"], type="enum", choices=statuses),
                     Answer(value=str(o["total"]), type="money")],
            assertions=[Assertion(entity="users", key=u["user_id"], field="address", value=o["address"])],
            rubric=["The agent reported the exact status and total from the order record.",
                    "The agent copied the order's shipping address into the profile after the user confirmed."],
            tags=["read", "write", "profile"],
        ))
    names = {}
    for p in products:
        names.setdefault(p["name"], []).append(p)
    unique = [p for p in products if len(names[p["name"]]) == 1 and p["stock"] >= 2]
    for p in rng.sample(unique, 6):
        u = users[rng.choice(sorted(users))]
        qty = rng.randint(1, min(3, p["stock"]))
        tasks.append(TaskSpec(
            id=f"buy_{p['product_id']}_{u['user_id']}",
            instruction=f"Order {qty} of the {p['name']} for yourself.",
            opening=f"Hi! I'd like to buy {qty} {p['name']}.",
            user_known={"email": u["email"], "product_name": p["name"], "quantity": str(qty)},
            solution=[auth(u["user_id"]), _call("search_products", query=p["name"]),
                      _call("place_order", user_id=u["user_id"], product_id=p["product_id"], quantity=qty)],
            final_reply=f"Your order of {qty} {p['name']} is placed.",
            assertions=[Assertion(entity="products", key=p["product_id"], field="stock", value=p["stock"] - qty)],
            rubric=["The agent found the product by searching and confirmed quantity and price before ordering."],
            tags=["write", "order"],
        ))
    for uid in rng.sample(sorted(users), 4):
        u = users[uid]
        address = rng.choice(NEW_ADDRESSES)
        tasks.append(TaskSpec(
            id=f"move_{uid}",
            instruction=f"Update your default address to {address}.",
            opening="I moved recently and need to update my address.",
            user_known={"email": u["email"], "new_address": address},
            solution=[auth(uid), _call("update_user_address", user_id=uid, address=address)],
            final_reply=f"Your address is now {address}.",
            assertions=[Assertion(entity="users", key=uid, field="address", value=address)],
            rubric=["The agent authenticated the user before changing the address."],
            tags=["write", "profile"],
        ))
    problems = policy_violations(data, tasks)
    if problems:
        raise ValueError("retail tasks contradict policy.md: " + "; ".join(problems))
    return tasks


# policy.md: pending orders can be cancelled or re-addressed, delivered orders can be returned.
_NEEDS_STATUS = {"cancel_pending_order": "pending", "modify_pending_order_address": "pending",
                 "return_delivered_order": "delivered"}


def policy_violations(data: LoadedEnvironment, tasks: list[TaskSpec]) -> list[str]:
    """Tasks whose reference solution breaks policy.md: an order change its status does not allow, or an order
    acted on for a user who does not own it."""
    orders = data.initial.tables["orders"]
    problems = []
    for task in tasks:
        owner = None
        for call in task.solution:
            if call.name == "find_user_id_by_email":
                owner = next((u for u, r in data.initial.tables["users"].items()
                              if r["email"] == call.arguments["email"]), None)
            order = orders.get(str(call.arguments.get("order_id")))
            if order is None:
                continue
            if call.name in _NEEDS_STATUS and order["status"] != _NEEDS_STATUS[call.name]:
                problems.append(f"{task.id}: {call.name} on {order['order_id']}, which is {order['status']}")
            if order["user_id"] != owner:
                problems.append(f"{task.id}: {call.name} on {order['order_id']} of another user")
    return problems
