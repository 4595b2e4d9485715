"""Stage 3c, names that say what a tool does: checks that hold each tool's name, description and effect to each
other, run on every generated tool (procedural or mechanism) against its seeded world.

- `reaches_named_state`: a tool named by a state verb (`confirm_`, `cancel_`, `pause_`, `archive_` ...) must, when
  it goes through, set some field to that verb's state (`confirmed`, `cancelled`, ...), set a boolean field named
  by it (`archived`, `done`) to true, or, for cancel/remove/delete verbs, remove the record.
- `blocked_item_refused`: a write that creates a record naming a catalog item must refuse an item in the catalog's
  blocking state (its last status: delisted, sold, closed, offline).
- `changes_where_changeable`: a procedural field change (`change_<entity>_<field>`) on an entity with a state machine
  goes through on records in a state some transition leaves and is refused on records in a final state.
- `deletes_cascade`: deleting a record leaves no record of another table naming it.
"""

from __future__ import annotations

from typing import Any

from envgym.world.mechanisms.workflow import VERBS
from envgym.world.spec import ToolSpec, WorldSpec
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor
from synth.model import DomainModel

REMOVING = ("cancel", "remove", "delete", "withdraw")
# Verbs that name the state their object ends in (a `post_` or `book_` tool makes a record; it does not promise
# a state called "posted" or "booked").
STATE_VERBS = ("confirm", "cancel", "complete", "approve", "reject", "close", "archive", "pause", "resume", "ship",
               "deliver", "suspend", "activate", "publish", "resolve", "reopen", "finish", "accept", "decline",
               "expire", "void", "check_in", "release", "start", "drop", "withdraw", "abort")
STATES_OF: dict[str, set[str]] = {v: {v + "d" if v.endswith("e") else v + "ed"} for v in STATE_VERBS}
for _state, _verb in VERBS.items():
    if _verb in STATES_OF:
        STATES_OF[_verb].add(_state)


def state_verb(name: str) -> str | None:
    """The state verb a tool name starts with (`check_in` and the rest by their first word), else None."""
    for verb in sorted(STATES_OF, key=len, reverse=True):
        if name == verb or name.startswith(verb + "_"):
            return verb
    return None


def reaches_named_state(before: WorldState, after: WorldState, verb: str) -> bool:
    states = STATES_OF[verb]
    for change in before.diff(after):
        if change.kind == "changed" and ((isinstance(change.after, str) and change.after in states) or (change.after is True and change.field in states)):
            return True
        if change.kind == "added" and any(isinstance(v, str) and v in states for v in (change.after or {}).values()):
            return True
        if change.kind == "removed" and verb in REMOVING:
            return True
    return False


def _catalogs(domain: DomainModel) -> dict[str, str]:
    """catalog plural -> its blocking status (the last of its states)."""
    return {e.plural: e.field("status").choices[-1] for e in domain.entities if e.catalog and e.of_kind("state")}


def blocked_item_refused(world: WorldSpec, domain: DomainModel, executor: ToolExecutor, state: WorldState,
                         tool: ToolSpec, args: dict[str, Any], after: WorldState) -> bool | None:
    """None when the call created no record naming a catalog item."""
    blocked = _catalogs(domain)
    for change in state.diff(after):
        if change.kind != "added":
            continue
        for catalog, status in blocked.items():
            key = world.entities[catalog].key
            named = (change.after or {}).get(key)
            arg = next((n for n, v in args.items() if v == named and named is not None), None)
            if arg is None:
                continue
            bad = sorted(k for k, r in state.tables[catalog].items() if r.get("status") == status)
            if not bad:
                return None
            trial = state.copy()
            return not executor.execute(trial, tool.name, {**args, arg: bad[0]}).ok
    return None


def changes_where_changeable(domain: DomainModel, executor: ToolExecutor, state: WorldState, tool: ToolSpec,
                             args: dict[str, Any], entity: str) -> bool | None:
    e = domain.entity(entity)
    if not e.workflow or not e.of_kind("state") or tool.effect is None or tool.effect.key_arg is None:
        return None
    leaving = {s for t in e.workflow for s in t.source}
    for status in e.field("status").choices:
        witness = sorted(k for k, r in state.tables[e.plural].items() if r.get("status") == status)
        if not witness:
            continue
        trial = state.copy()
        ok = executor.execute(trial, tool.name, {**args, tool.effect.key_arg: witness[0]}).ok
        if ok != (status in leaving):
            return False
    return True


def deletes_cascade(world: WorldSpec, before: WorldState, after: WorldState) -> bool | None:
    removed = {(c.entity, c.key) for c in before.diff(after) if c.kind == "removed"}
    if not removed:
        return None
    for name, entity in world.entities.items():
        refs = {f: spec.ref for f, spec in entity.fields.items() if spec.ref}
        for record in after.tables.get(name, {}).values():
            if any((ref, str(record.get(f))) in removed for f, ref in refs.items()):
                return False
    return True


def agreement_checks(world: WorldSpec, domain: DomainModel, executor: ToolExecutor, state: WorldState,
                     tool: ToolSpec, args: dict[str, Any], entity: str, operator: str) -> dict[str, bool]:
    """Every agreement check that applies to one valid call (`args` went through on a copy of `state`)."""
    after = state.copy()
    if not executor.execute(after, tool.name, args).ok or tool.read_only:
        return {}
    out: dict[str, bool] = {}
    verb = state_verb(tool.name)
    if verb is not None:
        out["reaches_named_state"] = reaches_named_state(state, after, verb)
    for name, check in (("blocked_item_refused", blocked_item_refused(world, domain, executor, state, tool, args,
                                                                      after)),
                        ("changes_where_changeable", changes_where_changeable(domain, executor, state, tool, args,
                                                                              entity) if operator == "update"
                         else None),
                        ("deletes_cascade", deletes_cascade(world, state, after))):
        if check is not None:
            out[name] = check
    return out
