"""The mechanism catalogue (envgym.world.mechanisms): every invariant holds under random calls, every tool goes
through at least once, every rule refuses something, and a broken mechanism is caught by the same check."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from envgym.world.files import dump_world, load_world
from envgym.world.mechanisms import CATALOGUE, Bound, install
from envgym.world.mechanisms.check import base_entities, fuzz, mechanism_world
from envgym.world.mechanisms.inventory import CAPACITY
from envgym.world.spec import SpecError, WorldSpec
from envgym.world.state import WorldState, generate_state
from envgym.world.tools import ToolExecutor


def test_the_catalogue_holds_at_least_40_mechanisms_with_distinct_rules() -> None:
    assert len(CATALOGUE) >= 40
    assert len({m.rule for m in CATALOGUE.values()}) == len(CATALOGUE)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_invariant_holds_under_random_calls(name: str) -> None:
    world = mechanism_world(name)
    report = fuzz(world, calls=300, seed=7)
    assert report.violation is None, report.violation
    assert report.crashed == []
    assert [t.name for t in world.tools if not report.ok.get(t.name)] == [], "a tool never went through"
    if any(not t.read_only for t in world.tools):
        assert sum(report.refused.values()) > 0, "the rule never refused a call"


def test_a_mechanism_that_breaks_its_rule_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def cancel_keeping_capacity(b: Bound, state: WorldState, a: dict[str, Any]) -> Any:
        record = b.get(state, "record", a["@record"])
        record[b.f("record", "status")] = b.p("closed_state")  # the quantity is never given back
        return {}

    tools = tuple(dataclasses.replace(t, run=cancel_keeping_capacity) if t.verb == "cancel_{record}" else t
                  for t in CAPACITY.tools)
    monkeypatch.setitem(CATALOGUE, "capacity_booking", dataclasses.replace(CAPACITY, tools=tools))
    report = fuzz(mechanism_world("capacity_booking"), calls=300, seed=7)
    assert report.violation is not None and "cancel_record" in report.violation


def _run(world: WorldSpec, state: WorldState, name: str, **args: Any) -> Any:
    return ToolExecutor(world).execute(state, name, args)


def test_a_booking_larger_than_what_is_left_is_refused_and_changes_nothing() -> None:
    world = mechanism_world("capacity_booking")
    state = generate_state(world)
    item = min(state.tables["items"].values(), key=lambda i: i["available"])
    before = state.hash()
    result = _run(world, state, "book_item", party_id="P0000", item_id=item["item_id"], quantity=4) \
        if item["available"] < 4 else None
    if result is None:  # every item has room for 4: fill one first
        _run(world, state, "book_item", party_id="P0000", item_id=item["item_id"], quantity=item["available"] - 1)
        before = state.hash()
        result = _run(world, state, "book_item", party_id="P0000", item_id=item["item_id"], quantity=2)
    assert not result.ok and result.error_kind == "precondition" and "left" in result.error
    assert state.hash() == before


def test_a_transition_tool_is_named_by_the_state_it_reaches_and_guarded_by_its_sources() -> None:
    world = mechanism_world("state_machine")
    state = generate_state(world)
    names = {t.name for t in world.tools}
    assert {"confirm_record", "complete_record", "cancel_record"} <= names
    opened = next(k for k, r in state.tables["records"].items() if r["status"] == "open")
    assert _run(world, state, "complete_record", record_id=opened).error_kind == "precondition"
    assert _run(world, state, "confirm_record", record_id=opened).value["status"] == "confirmed"
    assert state.tables["records"][opened]["status"] == "confirmed"
    assert len(state.tables["status_changes"]) == 1


def test_deleting_a_record_deletes_its_attachments() -> None:
    world = mechanism_world("cascade_delete")
    state = generate_state(world)
    owner = next(iter(state.tables["attachments"].values()))["record_id"]
    result = _run(world, state, "delete_record", record_id=owner)
    assert result.ok and result.value["attachments_deleted"] >= 1
    assert all(a["record_id"] != owner for a in state.tables["attachments"].values())


def test_a_world_with_mechanisms_is_pure_data_and_round_trips(tmp_path: Path) -> None:
    world = mechanism_world("balance_transfer")
    dump_world(world, tmp_path / "world.yaml")
    assert "python" not in (tmp_path / "world.yaml").read_text()
    again = load_world(tmp_path / "world.yaml")
    assert again == world
    assert generate_state(again).hash() == generate_state(world).hash()
    result = _run(again, generate_state(again), "transfer_party_balance", from_party_id="P0000",
                  to_party_id="P0001", amount=100000)
    assert not result.ok and result.error_kind == "invalid_arguments"


def test_an_unknown_mechanism_is_named_in_the_error() -> None:
    with pytest.raises(SpecError, match="unknown mechanism 'teleport'"):
        install("teleport", "m", base_entities())
    world = mechanism_world("quota")
    broken = world.model_copy(update={"mechanisms": [world.mechanisms[0].model_copy(update={"mechanism": "nope"})]})
    with pytest.raises(SpecError, match="nope"):
        ToolExecutor(broken)
