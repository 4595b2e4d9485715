"""experiments/sibling_transfer.py: the fair conversations of the bundled retail and travel worlds."""

from __future__ import annotations

import sys
from pathlib import Path

import envgym  # noqa: F401  (registers the bundled envs)
from envgym.world.spec import TaskSpec

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "experiments"))

from sibling_transfer import facts_to_ask, fair_sibling_demos


def task(opening: str, known: dict[str, str], arguments: dict[str, object]) -> TaskSpec:
    return TaskSpec(id="t", instruction="x", opening=opening, user_known=known,
                    solution=[{"name": "find_user_id_by_email", "arguments": {"email": known["email"]}},
                              {"name": "update_reservation_bags", "arguments": arguments}])


def test_facts_to_ask_are_the_used_facts_the_opening_does_not_hold() -> None:
    known = {"email": "a@example.net", "reservation_id": "R0018", "bags": "1", "zip": "12345"}
    asked = facts_to_ask(task("Change the bags on my reservation R0018?", known,
                              {"reservation_id": "R0018", "bags": 1}))
    # "1" inside "R0018" is not the user saying 1 bag; the zip is never used, so never asked.
    assert asked == ["email", "bags"]
    assert facts_to_ask(task("Make it 1 bag on R0018, I am a@example.net.", known,
                             {"reservation_id": "R0018", "bags": 1})) == []


def test_every_retail_conversation_is_fair_and_asks_before_it_authenticates() -> None:
    demos, unfair = fair_sibling_demos("retail")
    assert unfair == {} and len(demos) == 36
    for demo in demos:
        roles = [m["role"] for m in demo["messages"]]
        first_call = next(i for i, m in enumerate(demo["messages"]) if m.get("tool_calls"))
        asked = [m["content"] for m in demo["messages"][:first_call] if m["role"] == "assistant"]
        assert asked and all(q.startswith("Could you tell me your") for q in asked), demo["task_id"]
        assert any("email" in q for q in asked)
        assert roles[-1] == "user"


def test_travel_leaves_out_the_tasks_whose_value_is_derived() -> None:
    demos, unfair = fair_sibling_demos("travel")
    # "add one checked bag" writes 1: a value no message states, which a demonstration must not teach to guess.
    assert set(unfair) == {"status_R0036", "status_R0042", "status_R0004"}
    assert len(demos) == 31
    assert all(v == ["update_reservation_bags: 1"] for v in unfair.values())
