"""Query effects over one table: optional filters, sorting, pages, joins along references, and aggregates.

Pure functions of rows and tool arguments, used by `envgym.world.tools` for the list, search, aggregate and
update_many effects (and `expand` on get). A filter whose argument is absent is skipped, so it is optional.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from envgym.world.spec import Effect

Record = dict[str, Any]
Compare = Callable[[Any, str, Any], bool]


def argument(name: str, args: dict[str, Any]) -> Any:
    """The argument `name`; `a.b` reads field b of the object argument a (reshaped, nested arguments)."""
    if "." not in name:
        return args.get(name)
    value: Any = args
    for part in name.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _ref(value: str, args: dict[str, Any]) -> Any:
    return argument(value[1:], args) if value.startswith("$") else value


def filter_rows(rows: list[Record], effect: Effect, args: dict[str, Any], compare: Compare) -> list[Record]:
    """Rows matching every filter whose argument was given."""
    active = [(f.field, f.op, value) for f in effect.filters if (value := argument(f.arg.lstrip("$"), args)) is not None]
    return [r for r in rows if all(compare(r.get(fname), op, value) for fname, op, value in active)]


def sort_and_page(rows: list[Record], effect: Effect, args: dict[str, Any]) -> list[Record]:
    """Rows sorted (missing values last) and cut to one page of `effect.limit`."""
    if effect.sort_by is not None:
        by = _ref(effect.sort_by, args)
        if by is not None:
            descending = _ref(effect.order, args) == "desc"
            # Sort on (missing, value) so None never meets a number; key order breaks ties stably.
            present = [r for r in rows if r.get(by) is not None]
            absent = [r for r in rows if r.get(by) is None]
            rows = sorted(present, key=lambda r: r[by], reverse=descending) + absent
    page = argument(effect.page_arg, args) if effect.page_arg else None
    start = (int(page) - 1) * effect.limit if isinstance(page, int) and page > 0 else 0
    return rows[start : start + effect.limit]


def expand(record: Record, effect: Effect, tables: dict[str, dict[str, Record]], refs: dict[str, str]) -> Record:
    """The record with each expanded reference field's record joined in under the field name less `_id`."""
    if not effect.expand:
        return record
    out = dict(record)
    for fname in effect.expand:
        target = tables.get(refs.get(fname, ""), {}).get(str(record.get(fname)))
        out[fname.removesuffix("_id")] = dict(target) if target is not None else None
    return out


def _reduce(rows: list[Record], effect: Effect, key: str) -> Any:
    if effect.aggregate == "count":
        return len(rows)
    field = effect.aggregate_field or ""
    values = [(r[field], r[key]) for r in rows if isinstance(r.get(field), int | float)]
    if effect.aggregate == "sum":
        return round(sum(v for v, _ in values), 2)
    if not values:
        return None
    # min/max also name the record, so "the cheapest one" can be acted on; ties go to the smallest key.
    pick = min(values, key=lambda vk: (vk[0], vk[1])) if effect.aggregate == "min" else \
        min(values, key=lambda vk: (-vk[0], vk[1]))
    return {"value": pick[0], key: pick[1]}


def aggregate(rows: list[Record], effect: Effect, key: str) -> Any:
    """count/sum/min/max over the rows, or one result per value of `group_by` (groups in sorted order)."""
    if effect.group_by is None:
        return {effect.aggregate or "count": _reduce(rows, effect, key)}
    groups: dict[str, list[Record]] = {}
    for r in rows:
        groups.setdefault(str(r.get(effect.group_by)), []).append(r)
    return {g: _reduce(groups[g], effect, key) for g in sorted(groups)}
