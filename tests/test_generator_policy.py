"""Bundled generators check their tasks against the policy they ship with (issue 37, part 5): a reference solution
that contradicts policy.md cannot be generated, and the bundled task files keep it."""

from __future__ import annotations

import pytest

from envgym.loader import load_environment
from envgym.registry import bundled_dir
from envgym.world.folder import load_module
from envgym.world.spec import TaskSpec, ToolCall

CHECKED = ["retail", "travel"]  # the generators whose policy names a choice or a precondition of a write


@pytest.mark.parametrize("name", CHECKED)
def test_every_bundled_task_keeps_its_policy(name: str) -> None:
    folder = bundled_dir() / name
    data = load_environment(str(folder))
    assert load_module(folder, "generate").policy_violations(data, data.tasks) == []


def _booking(flight: str, user: str, passengers: int) -> TaskSpec:
    return TaskSpec(id=f"book_{flight}_{user}", instruction="Book the cheapest flight.", opening="Book.",
                    solution=[ToolCall(name="book_reservation", arguments={
                        "user_id": user, "flight_number": flight, "passengers": passengers, "cabin": "economy"})])


def test_the_travel_check_names_the_tasks_the_issue_found() -> None:
    """The three bookings of the old tasks.jsonl: HAT000 (delayed, $382) where HAT048 ($358, scheduled, 1 seat) is
    the policy's flight for one passenger, and two bookings of delayed flights."""
    folder = bundled_dir() / "travel"
    data = load_environment(str(folder))
    old = [_booking("HAT000", "T0002", 1), _booking("HAT051", "T0006", 1), _booking("HAT003", "T0019", 1)]
    problems = load_module(folder, "generate").policy_violations(data, old)
    assert len(problems) == 3
    assert problems[0] == "book_HAT000_T0002: books HAT000 where the policy offers HAT048"
