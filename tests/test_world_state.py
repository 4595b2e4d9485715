"""World state: seeded generation, canonical hash, snapshot/restore and diff."""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import pickle
import random
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers the bundled environments)
from envgym.protocol import format_tool_call
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


# ---------------------------------------------------------------- copy-on-write: isolation between episodes


def _write_calls(data: Any) -> dict[str, dict[str, Any]]:
    """One reference-solution call of every write tool of an environment."""
    writes = {t.name for t in data.world.tools if not t.read_only}
    calls: dict[str, dict[str, Any]] = {}
    for task in data.tasks:
        for step in task.solution:
            if step.name in writes:
                calls.setdefault(step.name, step.arguments)
    assert set(calls) == writes, f"no solution calls {sorted(writes - set(calls))}"
    return calls


@pytest.mark.parametrize("name", ["retail", "travel", "workspace"])
def test_every_write_tool_leaves_the_next_episode_and_the_initial_world_untouched(name: str) -> None:
    env = gym.make(f"envgym/{name}-v0", guard=False, max_steps=10**6).unwrapped
    initial = env.data.initial
    before = copy.deepcopy(initial.plain())
    start = initial.hash()
    env.reset(seed=0)
    assert env.state.hash() == start
    for tool, arguments in _write_calls(env.data).items():
        previous = env.state.hash()
        obs, *_ = env.step(format_tool_call(tool, arguments))
        assert '"error"' not in obs, f"{tool}: {obs}"
        assert env.state.hash() != previous, f"{tool} changed nothing"
    env.reset(seed=1)
    assert env.state.hash() == start
    assert initial.plain() == before and initial.hash() == start


def test_a_planted_attack_stays_in_its_episode() -> None:
    env = gym.make("envgym/workspace-v0").unwrapped
    start = env.data.initial.hash()
    attack = env.security.attacks.attack_ids()[0]
    env.reset(seed=0, options={"attack": attack})
    assert env.state.hash() != start
    env.reset(seed=0)
    assert env.state.hash() == start == env.data.initial.hash()


def test_a_copy_shares_records_until_one_side_hands_them_out() -> None:
    state = WorldState({"t": {"x": {"k": [1]}, "y": {"k": [2]}}})
    child = state.copy()
    assert child.tables["t"].peek("x") is state.tables["t"].peek("x")  # nothing was copied
    child.table("t")["x"]["k"].append(99)
    assert state.table("t")["x"] == {"k": [1]} and child.table("t")["x"] == {"k": [1, 99]}
    assert child.tables["t"].peek("y") is state.tables["t"].peek("y")  # only the record written was copied


@pytest.mark.parametrize("take", [
    dict, lambda t: {**t}, lambda t: t.copy(), copy.deepcopy, copy.copy, lambda t: pickle.loads(pickle.dumps(t)),
    lambda t: dict(t.items()), lambda t: t | {}, lambda t: dict(zip(t.keys(), t.values(), strict=True)),
    lambda t: {k: t.get(k) for k in t}, lambda t: {k: t.pop(k) for k in list(t)},
])
def test_no_way_of_reading_a_table_reaches_a_shared_record(take: Callable[[Any], dict[str, Any]]) -> None:
    state = WorldState({"t": {"x": {"k": [1], "d": {"n": 1}}}})
    child = state.copy()
    for record in take(child.tables["t"]).values():
        record["k"].append(99)
        record["d"]["n"] = 2
        record["new"] = True
    assert state.table("t")["x"] == {"k": [1], "d": {"n": 1}}
    assert state.copy().hash() == WorldState({"t": {"x": {"k": [1], "d": {"n": 1}}}}).hash()


def test_copies_of_copies_stay_apart() -> None:
    base = WorldState({"t": {"x": {"v": 0}}})
    a = base.copy()
    a.table("t")["x"]["v"] = 1
    b = a.copy()  # forked after a wrote: a's own record becomes shared again
    a.table("t")["x"]["v"] = 2
    b.table("t")["x"]["v"] = 3
    del a.table("t")["x"]
    assert [s.tables["t"].get("x") for s in (base, a, b)] == [{"v": 0}, None, {"v": 3}]


def test_restore_goes_back_to_the_snapshot_and_the_snapshot_stays_reusable(shop_world: WorldSpec) -> None:
    state = generate_state(shop_world)
    before, snap = state.hash(), state.snapshot()
    for qty in (1000, 1001):
        state.table("items")["I0000"]["qty"] = qty
        assert state.hash() != before
        state.restore(snap)
        assert state.hash() == before == snap.hash()


def _plain_json(state: WorldState) -> str:
    return json.dumps(state.plain(), sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def test_the_cached_canonical_json_follows_every_change_of_every_fork() -> None:
    base = WorldState({"b": {"x": {"v": 0, "é": "ü"}, "y": {"v": [1, {"d": datetime.date(2026, 1, 2)}]}},
                       "a": {"z": {"v": None}}})
    a = base.copy()
    steps: list[Callable[[], object]] = [
        lambda: a.table("b")["x"].update(v=1),           # a handed-out record, changed
        lambda: a.copy(),                                 # a's own records become shared again
        lambda: a.table("b").pop("y"),                    # a shared record removed: nothing else owned
        lambda: a.table("a").__setitem__("w", {"v": 2}),  # a record added
        lambda: a.table("b")["x"].update(v=3),
    ]
    for step in steps:
        step()
        for state in (base, a, a.copy()):
            assert state.canonical_json() == _plain_json(state)
    assert WorldState({"t": {1: {"v": 1}, 2: {"v": 2}}}).canonical_json() == '{"t":{"1":{"v":1},"2":{"v":2}}}'


def test_the_remembered_hash_follows_every_change_of_every_fork() -> None:
    """`hash()` remembers its digest while the tables hand back the same texts: after 600 random changes made
    through every way a table can be changed, on a web of forks, snapshots and restores, every state's hash is
    still the sha256 of its data encoded from scratch, and a state nobody touched is not encoded again."""
    rng = random.Random(5)
    states = [WorldState({"b": {f"k{i}": {"v": i, "tags": [i]} for i in range(6)}, "a": {"z": {"v": None}}})]
    snapshots: list[WorldState] = []

    def change(state: WorldState) -> None:
        table = state.table(rng.choice(["a", "b"]))
        keys = list(table)
        key = rng.choice(keys) if keys else "k0"
        how = rng.randrange(11)
        if how == 0 and keys:
            table[key]["v"] = rng.random()                      # handed out by [], changed in place
        elif how == 1 and keys:
            table.get(key).setdefault("tags", []).append(1)    # by get, a nested list changed
        elif how == 2:
            for record in table.values():                      # by values()
                record["v"] = 0
        elif how == 3:
            for _, record in table.items():                    # by items()
                record.pop("tags", None)
        elif how == 4:
            table[f"n{rng.randrange(99)}"] = {"v": -1}          # added
        elif how == 5 and keys:
            del table[key]
        elif how == 6:
            table.pop(key, None)
        elif how == 7:
            table.setdefault(f"s{rng.randrange(9)}", {"v": 7})
        elif how == 8:
            table.update({key: {"v": "u"}})
        elif how == 9 and rng.random() < 0.1:
            table.clear()
        elif how == 10 and snapshots:
            state.restore(rng.choice(snapshots))

    for _ in range(600):
        roll = rng.random()
        if roll < 0.15:
            states.append(rng.choice(states).copy())
        elif roll < 0.2:
            snapshots.append(rng.choice(states).snapshot())
        else:
            change(rng.choice(states))
        for state in rng.sample(states, min(4, len(states))) + snapshots[-1:]:
            assert state.hash() == hashlib.sha256(_plain_json(state).encode()).hexdigest()
    untouched = states[-1]
    untouched.hash()
    remembered = untouched._digest
    assert untouched.hash() and untouched._digest is remembered  # nothing changed: no new digest computed
