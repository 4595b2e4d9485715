"""World state: seeded generation, canonical hash, snapshot/restore and diff."""

from __future__ import annotations

from envgym.world.spec import WorldSpec
from envgym.world.state import WorldState, generate_state, next_key


def test_same_seed_same_records_and_hash(shop_world: WorldSpec) -> None:
    a, b = generate_state(shop_world), generate_state(shop_world)
    assert a.tables == b.tables
    assert a.hash() == b.hash()


def test_other_seed_other_records(shop_world: WorldSpec) -> None:
    assert generate_state(shop_world, seed=1).hash() != generate_state(shop_world, seed=2).hash()


def test_hash_ignores_insertion_order() -> None:
    a = WorldState({"t": {"x": {"k": 1, "v": 2}, "y": {"k": 2}}})
    b = WorldState({"t": {"y": {"k": 2}, "x": {"v": 2, "k": 1}}})
    assert a.hash() == b.hash()


def test_snapshot_restore_undoes_changes(shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    before, snap = state.hash(), state.snapshot()
    state.table("items")["I0000"]["qty"] = 1000
    assert state.hash() != before
    state.restore(snap)
    assert state.hash() == before


def test_diff_lists_added_removed_and_changed_fields() -> None:
    a = WorldState({"t": {"x": {"k": 1}, "y": {"k": 2}}})
    b = WorldState({"t": {"x": {"k": 5}, "z": {"k": 3}}})
    kinds = [(c.key, c.kind, c.field) for c in a.diff(b)]
    assert kinds == [("x", "changed", "k"), ("y", "removed", None), ("z", "added", None)]


def test_refs_point_at_existing_keys() -> None:
    world = WorldSpec.model_validate({
        "name": "refs", "tools": [{"name": "noop", "description": "d", "python": "m:f"}],
        "entities": {
            "orders": {"key": "id", "count": 6, "fields": {"id": {}, "user": {"ref": "users"}}},
            "users": {"key": "id", "prefix": "U", "count": 3, "fields": {"id": {}}},
        },
    })
    state = generate_state(world)
    assert {o["user"] for o in state.table("orders").values()} <= set(state.table("users"))


def test_unique_fields_may_hold_lists() -> None:
    world = WorldSpec.model_validate({
        "name": "tags", "tools": [{"name": "noop", "description": "d", "python": "m:f"}],
        "entities": {"posts": {"key": "id", "count": 3, "fields": {
            "id": {}, "tags": {"type": "list", "choices": [["a"], ["b"], ["a", "b"]], "unique": True}}}},
    })
    tags = [p["tags"] for p in generate_state(world).table("posts").values()]
    assert sorted(map(tuple, tags)) == [("a",), ("a", "b"), ("b",)]


def test_next_key_is_the_first_free_key_from_the_table_size() -> None:
    assert next_key({}, "R") == "R0000"
    assert next_key({"R0000": {}, "R0002": {}}, "R") == "R0003"  # R0002 is taken: skip it, never reuse R0001
    assert next_key({"HAT000": {}}, "HAT", "{prefix}{index:03d}") == "HAT001"
