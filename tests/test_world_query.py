"""Query effects: optional filters, sort and pages, aggregates, joins, bulk updates, reference checks, nested args."""

from __future__ import annotations

from envgym.world.spec import Effect, EntitySpec, FieldSpec, Filter, Precondition, ToolSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor

OPEN = {"type": "object", "properties": {}, "additionalProperties": True}


def _world(*tools: ToolSpec) -> tuple[WorldSpec, WorldState]:
    entities = {
        "customers": EntitySpec(key="customer_id", fields={"customer_id": FieldSpec(), "name": FieldSpec()}),
        "orders": EntitySpec(key="order_id", fields={"order_id": FieldSpec(), "customer_id": FieldSpec(ref="customers"),
                                                     "total": FieldSpec(type="number"), "status": FieldSpec()}),
    }
    state = WorldState({
        "customers": {"C1": {"customer_id": "C1", "name": "Ada"}, "C2": {"customer_id": "C2", "name": "Bo"}},
        "orders": {f"O{i}": {"order_id": f"O{i}", "customer_id": "C1" if i < 4 else "C2", "total": t,
                             "status": s} for i, (t, s) in enumerate(
            [(30.0, "pending"), (10.0, "pending"), (20.0, "shipped"), (40.0, "pending"), (5.0, "pending")])},
    })
    return WorldSpec(name="q", entities=entities, tools=list(tools)), state


def _tool(name: str, effect: Effect, read: bool = True) -> ToolSpec:
    return ToolSpec(name=name, description=name, parameters=OPEN, effect=effect, labels=["read_only"] if read else [])


def run(tool: ToolSpec, args: dict[str, object]) -> object:
    world, state = _world(tool)
    result = ToolExecutor(world).execute(state, tool.name, args)
    assert result.ok, result.error
    return result.value


def test_absent_filters_are_skipped_and_given_ones_all_apply() -> None:
    effect = Effect(op="list", entity="orders", filters=[Filter(field="status", arg="$status"),
                                                         Filter(field="total", op="ge", arg="$min_total")])
    tool = _tool("find", effect)
    assert len(run(tool, {})) == 5  # type: ignore[arg-type]
    assert [r["order_id"] for r in run(tool, {"status": "pending", "min_total": 10})] == ["O0", "O1", "O3"]  # type: ignore[union-attr,index]


def test_sort_by_an_argument_and_pages_of_the_limit() -> None:
    effect = Effect(op="list", entity="orders", sort_by="$by", order="$order", page_arg="page", limit=2)
    tool = _tool("page", effect)
    assert [r["total"] for r in run(tool, {"by": "total", "order": "desc", "page": 1})] == [40.0, 30.0]  # type: ignore[union-attr,index]
    assert [r["total"] for r in run(tool, {"by": "total", "order": "desc", "page": 3})] == [5.0]  # type: ignore[union-attr,index]


def test_aggregates_name_the_record_of_a_minimum_and_group() -> None:
    def agg(how: str, group: str | None = None) -> object:
        return run(_tool("agg", Effect(op="aggregate", entity="orders", aggregate=how,  # type: ignore[arg-type]
                                       aggregate_field="total", group_by=group,
                                       filters=[Filter(field="customer_id", arg="$customer_id")])),
                   {"customer_id": "C1"})
    assert agg("count") == {"count": 4} and agg("sum") == {"sum": 100.0}
    assert agg("min") == {"min": {"value": 10.0, "order_id": "O1"}}
    assert agg("count", "status") == {"pending": 3, "shipped": 1}


def test_get_joins_the_referenced_record_and_nested_arguments_resolve() -> None:
    tool = _tool("get", Effect(op="get", entity="orders", match={"order_id": "$ref.order_id"}, expand=["customer_id"]))
    got = run(tool, {"ref": {"order_id": "O4"}})
    assert got["customer"] == {"customer_id": "C2", "name": "Bo"}  # type: ignore[index]


def test_update_many_changes_only_records_its_guard_allows() -> None:
    tool = _tool("ship_all", Effect(op="update_many", entity="orders", set={"status": "shipped"},
                                    filters=[Filter(field="customer_id", arg="$customer_id")],
                                    preconditions=[Precondition(field="status", op="in", value=["pending"],
                                                                error="")]), read=False)
    assert run(tool, {"customer_id": "C1"}) == {"updated": ["O0", "O1", "O3"]}


def test_create_with_reference_checks_refuses_an_unknown_key() -> None:
    tool = _tool("add", Effect(op="create", entity="orders", check_refs=True,
                               set={"customer_id": "$customer_id", "total": 1.0, "status": "pending"}), read=False)
    world, state = _world(tool)
    bad = ToolExecutor(world).execute(state, "add", {"customer_id": "C9"})
    assert not bad.ok and bad.error_kind == "not_found" and len(state.tables["orders"]) == 5
    assert ToolExecutor(world).execute(state, "add", {"customer_id": "C2"}).ok
