"""BFCL's multi-turn backends read by the synthesizer's counter (issue 38, docs/results/synth_v3.md).

`synth stats` asks of every tool whether it is code with a rule and whether one call writes two or more records or
tables. BFCL's backends (GorillaFileSystem, TradingBot, TravelAPI, VehicleControl, MessageAPI, TwitterAPI,
TicketAPI, MathAPI) are Python classes, so every tool is code; which tools write what is read by running them: every
ground-truth call of the `multi_turn_base` entries is run with BFCL's own executor (`Backends`, as
`envgym/bfcl-multi-turn-v0` runs it), and the backend instances' state is compared before and after. A table is a
top-level attribute of an instance holding a container or an object, a record a key or position directly under it
(a file system's tree is one table; the attributes holding plain values, a vehicle's brake force and door locks,
are one record of the instance's own fields; an attribute pointing into another, a file system's current
directory, is such a field). A tool writes several records or tables when some call of it changed
two or more of either. Tools no ground-truth call uses are counted apart.
Run: `python experiments/bfcl_counter.py` (prints one JSON object).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from typing import Any

from envgym.integrations.bfcl import data
from envgym.integrations.bfcl.multi_turn import Backends

CATEGORY = "multi_turn_base"
_SCALARS = (str, int, float, bool, type(None))


def _plain(value: Any, path: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """The value as nested dicts, lists and scalars (objects by their attributes, cycles and depth cut)."""
    if isinstance(value, _SCALARS):
        return value
    if id(value) in path or depth > 12:
        return "<cycle>"
    inner = path | {id(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v, inner, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        items = sorted(value, key=repr) if isinstance(value, set) else value
        return [_plain(v, inner, depth + 1) for v in items]
    if hasattr(value, "__dict__"):
        return {k: _plain(v, inner, depth + 1) for k, v in sorted(vars(value).items()) if k != "parent"}
    return repr(value)


def _records(before: Any, after: Any, fields: bool = False) -> int:
    """How many keys or positions directly under a changed table differ; the instance's own fields are one
    record however many of them change."""
    if fields:
        return 1
    if isinstance(before, dict) and isinstance(after, dict):
        keys = set(before) | set(after)
        inner = [k for k in keys if before.get(k, "<absent>") != after.get(k, "<absent>")]
        if len(inner) == 1 and isinstance(before.get(inner[0]), dict | list):  # an object's one field: look inside
            return max(1, _records(before[inner[0]], after.get(inner[0])))
        return len(inner)
    if isinstance(before, list) and isinstance(after, list):  # as multisets: a removal shifts no other record
        old, new = Counter(map(repr, before)), Counter(map(repr, after))
        return max(sum((old - new).values()), sum((new - old).values()))
    return 1


def _reachable(value: Any, seen: set[int]) -> set[int]:
    """Ids of the objects reachable from `value` (containers and objects with attributes)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _SCALARS) or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set):
            stack.extend(item)
        elif hasattr(item, "__dict__"):
            stack.extend(v for k, v in vars(item).items() if k != "parent")  # down the tree, as `_plain` reads it
    return seen


def _state(backends: Backends) -> dict[str, Any]:
    """Each instance's tables: every attribute holding a container or an object, except one that points into
    another attribute (a file system's current directory, which is a node of its tree: recorded as the pointer
    it is); the attributes holding plain values together as one record of the instance's own fields."""
    state: dict[str, Any] = {}
    for cls, inst in sorted(backends.instances.items()):
        attrs = vars(inst)
        fields: dict[str, Any] = {}
        rank = sorted(attrs, key=lambda a: (a.startswith("_"), a))  # public attributes own what they share
        for attr, value in sorted(attrs.items()):
            inside = set().union(*(_reachable(v, set()) - ({id(v)} if rank.index(a) > rank.index(attr) else set())
                                   for a, v in attrs.items() if a != attr))
            if isinstance(value, _SCALARS):
                fields[attr] = value
            elif id(value) in inside:
                fields[attr] = f"<pointer {id(value)}>"
            else:
                state[f"{cls}.{attr}"] = _plain(value)
        state[f"{cls}.<fields>"] = fields
    return state


def _counter_step(before: Any, after: Any) -> bool:
    """Whether a change of the instance's own fields only moves id counters on (`tweet_counter` 5 -> 6): the
    synthesized worlds number records without a counter record, so this is also read without them."""
    if not isinstance(before, dict) or not isinstance(after, dict):
        return False
    moved = [k for k in set(before) | set(after) if before.get(k) != after.get(k)]
    return bool(moved) and all(("count" in k or k.endswith("_id")) and isinstance(before.get(k), int)
                               and after.get(k) == before[k] + 1 for k in moved)


def count() -> dict[str, Any]:
    tools: dict[str, set[str]] = defaultdict(set)  # class -> its public methods
    tables: dict[str, int] = defaultdict(int)  # tool -> most tables one call changed
    records: dict[str, int] = defaultdict(int)  # tool -> most records of one table one call changed
    bare: dict[str, int] = defaultdict(int)  # tool -> most tables one call changed, id counters left out
    calls = 0
    for task_id in data.task_ids(CATEGORY):
        backends = Backends(data.entry(task_id))
        for cls, inst in backends.instances.items():
            tools[cls].update(n for n in dir(inst) if not n.startswith("_") and callable(getattr(inst, n)))
        for turn in data.ground_truth(task_id):
            for call in turn:
                before = _state(backends)
                backends.run([call])
                after = _state(backends)
                name = call.split("(", 1)[0].strip()
                changed = [k for k in after if before.get(k) != after[k]]
                tables[name] = max(tables[name], len(changed))
                bare[name] = max(bare[name], sum(not _counter_step(before.get(k), after[k]) for k in changed))
                records[name] = max([records[name], *(_records(before.get(k), after[k], k.endswith("<fields>"))
                                                      for k in changed)])
                calls += 1
    every = sorted({t for names in tools.values() for t in names})
    used = sorted(tables)
    writing = [t for t in used if tables[t] > 0]
    several = [t for t in used if tables[t] >= 2 or records[t] >= 2]
    without_counters = [t for t in used if bare[t] >= 2 or records[t] >= 2]
    return {"category": CATEGORY, "entries": len(data.task_ids(CATEGORY)), "calls_run": calls,
            "classes": sorted(tools), "tools": len(every), "tools_that_are_code": len(every),
            "tools_called": len(used), "tools_that_wrote": len(writing),
            "tools_writing_several_records_or_tables": len(several),
            "several_share_of_called": round(len(several) / len(used), 4) if used else 0.0,
            "tools_writing_several_without_id_counters": len(without_counters),
            "several": {t: {"tables": tables[t], "records": records[t]} for t in several}}


if __name__ == "__main__":
    print(json.dumps(count(), indent=1, sort_keys=True))
