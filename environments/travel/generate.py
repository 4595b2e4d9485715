"""Deterministic task generator for travel: `envgym generate travel` rewrites tasks.jsonl from the seeded world."""

from __future__ import annotations

import random

from envgym.world import Answer, Assertion, LoadedEnvironment, TaskSpec, ToolCall

SEED = 77


def _call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=dict(arguments))


def generate_tasks(data: LoadedEnvironment) -> list[TaskSpec]:
    rng = random.Random(SEED)
    users = data.initial.tables["users"]
    flights = data.initial.tables["flights"]
    reservations = sorted(data.initial.tables["reservations"].values(), key=lambda r: r["reservation_id"])
    confirmed = [r for r in reservations if r["status"] == "confirmed"]
    tasks: list[TaskSpec] = []

    def choices(field: str) -> list[str]:
        return list(dict.fromkeys(str(c) for c in data.world.entities["flights"].fields[field].choices or []))

    def auth(uid: str) -> ToolCall:
        return _call("find_user_id_by_email", email=users[uid]["email"])

    for r in rng.sample(confirmed, 8):
        u, rid = users[r["user_id"]], r["reservation_id"]
        f = flights[r["flight_number"]]
        tasks.append(TaskSpec(
            id=f"cancel_{rid}",
            instruction=f"Cancel your reservation {rid} ({f['origin']} to {f['destination']} on {f['date']}).",
            opening=f"Hi, I need to cancel my reservation {rid}.",
            user_known={"email": u["email"], "reservation_id": rid},
            solution=[auth(u["user_id"]), _call("get_reservation_details", reservation_id=rid),
                      _call("cancel_reservation", reservation_id=rid)],
            final_reply=f"Reservation {rid} is cancelled.",
            assertions=[Assertion(entity="reservations", key=rid, field="status", value="cancelled")],
            rubric=["The agent confirmed the cancellation with the user before cancelling."],
            tags=["write", "cancel"],
        ))
    for r in rng.sample(confirmed, 7):
        u, rid = users[r["user_id"]], r["reservation_id"]
        bags = (r["bags"] + 1) % 4
        tasks.append(TaskSpec(
            id=f"bags_{rid}",
            instruction=f"Change the number of checked bags on reservation {rid} to {bags}.",
            opening=f"Can you change the checked bags on my reservation {rid}?",
            user_known={"email": u["email"], "reservation_id": rid, "bags": str(bags)},
            solution=[auth(u["user_id"]), _call("get_reservation_details", reservation_id=rid),
                      _call("update_reservation_bags", reservation_id=rid, bags=bags)],
            final_reply=f"Reservation {rid} now has {bags} checked bags.",
            assertions=[Assertion(entity="reservations", key=rid, field="bags", value=bags)],
            tags=["write", "bags"],
        ))
    for r in rng.sample([r for r in confirmed if r["cabin"] == "economy"], 5):
        u, rid = users[r["user_id"]], r["reservation_id"]
        tasks.append(TaskSpec(
            id=f"upgrade_{rid}",
            instruction=f"Upgrade reservation {rid} to business class.",
            opening=f"I'd like to upgrade my reservation {rid} to business.",
            user_known={"email": u["email"], "reservation_id": rid},
            solution=[auth(u["user_id"]), _call("get_reservation_details", reservation_id=rid),
                      _call("update_reservation_cabin", reservation_id=rid, cabin="business")],
            final_reply=f"Reservation {rid} is now in business class.",
            assertions=[Assertion(entity="reservations", key=rid, field="cabin", value="business")],
            tags=["write", "cabin"],
        ))
    routes: dict[tuple[str, str, str], list[dict]] = {}
    for f in flights.values():
        routes.setdefault((f["origin"], f["destination"], f["date"]), []).append(f)
    # (flight, party size) pairs where the policy names one flight: the unique cheapest scheduled one with a seat for
    # everybody in the party.
    bookable = [(best, n) for key in sorted(routes) for n in (1, 2) if (best := policy_flight(routes[key], n))]
    booked: set[str] = set()
    for f, n in rng.sample(bookable, min(8, len(bookable))):
        uid = rng.choice(sorted(users))
        if f"book_{f['flight_number']}_{uid}" in booked:
            continue
        booked.add(f"book_{f['flight_number']}_{uid}")
        tasks.append(TaskSpec(
            id=f"book_{f['flight_number']}_{uid}",
            instruction=(f"Book the cheapest flight from {f['origin']} to {f['destination']} on {f['date']} "
                         f"for {n} passenger(s) in economy."),
            opening=f"Hello, I want to fly from {f['origin']} to {f['destination']} on {f['date']}.",
            user_known={"email": users[uid]["email"], "passengers": str(n), "cabin": "economy"},
            solution=[auth(uid), _call("search_flights", origin=f["origin"], destination=f["destination"], date=f["date"]),
                      _call("book_reservation", user_id=uid, flight_number=f["flight_number"], passengers=n,
                            cabin="economy")],
            final_reply=f"You are booked on {f['flight_number']}.",
            assertions=[Assertion(entity="reservations", match={"user_id": uid, "flight_number": f["flight_number"],
                                                                "status": "confirmed"}, field="passengers", value=n)],
            rubric=["The agent offered the cheapest scheduled flight with enough seats and confirmed before booking."],
            tags=["write", "book"],
        ))
    # A question, then a change that depends on the answer. The user's words and the reference reply name no flight
    # status but the true one, so saying every status stays a guess.
    for r in rng.sample(confirmed, 6):
        u, rid = users[r["user_id"]], r["reservation_id"]
        f = flights[r["flight_number"]]
        if f["status"] == "scheduled":
            change, effect = _call("update_reservation_bags", reservation_id=rid, bags=r["bags"] + 1), "bags"
            done = f"I added a checked bag; it now has {r['bags'] + 1}."
        else:
            change, effect = _call("cancel_reservation", reservation_id=rid), "status"
            done = "As you asked, I went ahead with the cancellation of the reservation."
        tasks.append(TaskSpec(
            id=f"status_{rid}",
            instruction=f"Find out the flight number, departure time and flight status of reservation {rid}. If "
                        "the flight is not running on schedule, you want to cancel the reservation; if it is, you "
                        "want one more checked bag on it.",
            opening=f"Which flight is my reservation {rid} on, when does it leave, and is it on time? If it is not "
                    "running on schedule, please cancel my reservation; if it is, add one checked bag.",
            user_known={"email": u["email"], "reservation_id": rid},
            solution=[auth(u["user_id"]), _call("get_reservation_details", reservation_id=rid),
                      _call("get_flight_details", flight_number=f["flight_number"]), change],
            final_reply=f"Reservation {rid} is on {f['flight_number']}, departing {f['departure']}; it is "
                        f"{f['status']}. {done}",
            answers=[Answer(value=f["flight_number"], type="id"),
                     Answer(value=f["departure"], type="time", choices=choices("departure")),
                     Answer(value=f["status"], type="enum", choices=choices("status"))],
            assertions=[Assertion(entity="reservations", key=rid, field=effect,
                                  value=r["bags"] + 1 if effect == "bags" else "cancelled")],
            rubric=["The agent read the flight's status before choosing between cancelling and adding a bag."],
            tags=["read", "write", effect],
        ))
    problems = policy_violations(data, tasks)
    if problems:
        raise ValueError("travel tasks contradict policy.md: " + "; ".join(problems))
    return tasks


def policy_flight(options: list[dict], passengers: int) -> dict | None:
    """The flight policy.md says to offer on a route and date: the cheapest scheduled flight with at least
    `passengers` seats; None when there is none or two share the lowest price (the policy would not name one)."""
    fitting = [f for f in options if f["status"] == "scheduled" and f["seats_available"] >= passengers]
    if not fitting:
        return None
    cheapest = min(fitting, key=lambda f: (f["price"], f["flight_number"]))
    return cheapest if sum(f["price"] == cheapest["price"] for f in fitting) == 1 else None


def policy_violations(data: LoadedEnvironment, tasks: list[TaskSpec]) -> list[str]:
    """Tasks whose reference solution breaks policy.md: a booking of another flight than `policy_flight` for the
    route, date and party the user gave, or a change to a reservation that is not confirmed."""
    flights = data.initial.tables["flights"]
    reservations = data.initial.tables["reservations"]
    problems = []
    for task in tasks:
        for call in task.solution:
            args = call.arguments
            if call.name == "book_reservation":
                booked = flights[args["flight_number"]]
                route = [f for f in flights.values() if (f["origin"], f["destination"], f["date"])
                         == (booked["origin"], booked["destination"], booked["date"])]
                wanted = policy_flight(route, int(args["passengers"]))
                if wanted is None or wanted["flight_number"] != booked["flight_number"]:
                    offer = wanted["flight_number"] if wanted else "no single flight"
                    problems.append(f"{task.id}: books {booked['flight_number']} where the policy offers {offer}")
            elif (call.name in ("cancel_reservation", "update_reservation_bags", "update_reservation_cabin")
                  and reservations[args["reservation_id"]]["status"] != "confirmed"):
                problems.append(f"{task.id}: changes reservation {args['reservation_id']}, which is not confirmed")
    return problems
