"""Travel tools that need code: booking and cancelling move seats between flights and reservations."""

from __future__ import annotations

from typing import Any

from envgym.world import ToolError, WorldState, next_key


def book_reservation(state: WorldState, user_id: str, flight_number: str, passengers: int, cabin: str) -> dict[str, Any]:
    if state.get("users", user_id) is None:
        raise ToolError(f"no user with id {user_id}")
    flight = state.get("flights", flight_number)
    if flight is None:
        raise ToolError(f"no flight with number {flight_number}")
    if flight["status"] == "cancelled":
        raise ToolError(f"flight {flight_number} is cancelled and cannot be booked")
    if flight["seats_available"] < passengers:
        raise ToolError(f"flight {flight_number} has only {flight['seats_available']} seats left")
    flight["seats_available"] -= passengers
    table = state.table("reservations")
    reservation = {
        "reservation_id": next_key(table, "R"), "user_id": user_id, "flight_number": flight_number,
        "passengers": passengers, "cabin": cabin, "bags": 0, "status": "confirmed",
    }
    table[reservation["reservation_id"]] = reservation
    return reservation


def cancel_reservation(state: WorldState, reservation_id: str) -> dict[str, Any]:
    reservation = state.get("reservations", reservation_id)
    if reservation is None:
        raise ToolError(f"no reservation with id {reservation_id}")
    if reservation["status"] != "confirmed":
        raise ToolError(f"reservation {reservation_id} is {reservation['status']}; it cannot be cancelled")
    reservation["status"] = "cancelled"
    flight = state.get("flights", reservation["flight_number"])
    if flight is not None:
        flight["seats_available"] += reservation["passengers"]
    return reservation
