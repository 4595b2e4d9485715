"""Mechanisms over the shape of data: cascades, nested objects, many-to-many links, trees, uniqueness, soft
deletes, versions, lots that split and merge, and totals rolled up to a parent."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from envgym.world.mechanisms.base import Arg, Bound, Mechanism, Refusal, State, ToolDef, money, seeded
from envgym.world.spec import FieldSpec


def _exists(b: Bound, state: State, slot: str, key: Any) -> None:
    if b.peek(state, slot, key) is None:
        raise Refusal(f"no {b.word(slot) if slot in b.m.roles else slot} with id {key}", "not_found")


# ---------------------------------------------------------------- cascade_delete
def _notes_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "attachments")
    for key in sorted(state.table(b.ent("record"))):
        for _ in range(rng.randint(0, 2)):
            b.insert(state, "attachments", {b.key("record"): key, "file_name": rng.choice(["scan.pdf", "photo.jpg",
                                                                                         "notes.txt"])})


def _orphans(b: Bound, state: State) -> str | None:
    for a in b.rows(state, "attachments"):
        if b.peek(state, "record", a[b.key("record")]) is None:
            return f"attachment {a['attachment_id']} belongs to a deleted {b.word('record')}"
    return None


def _delete_record(b: Bound, state: State, a: dict[str, Any]) -> Any:
    _exists(b, state, "record", a["@record"])
    gone = sorted(x["attachment_id"] for x in b.rows(state, "attachments") if x[b.key("record")] == a["@record"])
    for key in gone:
        b.delete(state, "attachments", key)
    b.delete(state, "record", a["@record"])
    return {"deleted": a["@record"], "attachments_deleted": len(gone)}


def _attach(b: Bound, state: State, a: dict[str, Any]) -> Any:
    _exists(b, state, "record", a["@record"])
    made = b.insert(state, "attachments", {b.key("record"): a["@record"], "file_name": a["file_name"]})
    return {"attachment_id": made["attachment_id"]}


CASCADE_DELETE = Mechanism(
    name="cascade_delete",
    rule="deleting a record deletes its attachments with it; no attachment outlives its record",
    roles=("record",),
    tables=lambda b: b.log("attachments", "attachment_id", "AT", {**b.refs("record"), "file_name": FieldSpec()}),
    tools=(
        ToolDef("delete_{record}", "Delete {a_record} and every attachment of it. Returns how many attachments "
                "went with it.", {"@record": Arg("key", "the {record} id", "record")}, _delete_record,
                writes=("record", "attachments")),
        ToolDef("attach_file_to_{record}", "Attach a file to {a_record}. Returns the attachment id.",
                {"@record": Arg("key", "the {record} id", "record"), "file_name": Arg("text", "file name")}, _attach,
                writes=("attachments",)),
        ToolDef("list_{record}_attachments", "The attachments of {a_record}.",
                {"@record": Arg("key", "the {record} id", "record")},
                lambda b, s, a: b.must(s, "record", a["@record"]) and [
                    x for x in b.rows(s, "attachments") if x[b.key("record")] == a["@record"]]),
    ),
    invariant=_orphans, prepare=_notes_prepare, owns=("record.rows", "attachments.rows"),
    flows=(("list_{record}_attachments", "delete_{record}"), ("attach_file_to_{record}", "delete_{record}")),
)


# ---------------------------------------------------------------- cascade_archive
def _archive_prepare(b: Bound, state: State) -> None:
    for i in b.each(state, "item"):
        i[b.f("item", "archived")] = False
    for r in b.each(state, "record"):
        r[b.f("record", "archived")] = False


def _archive_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        item = b.peek(state, "item", r[b.ref("record", "item")])
        if item is not None and item[b.f("item", "archived")] and not r[b.f("record", "archived")]:
            return f"{key} is live under an archived {b.word('item')}"
    return None


def _archive(b: Bound, state: State, a: dict[str, Any]) -> Any:
    item = b.get(state, "item", a["@item"])
    if item[b.f("item", "archived")]:
        raise Refusal(f"{b.word('item')} {a['@item']} is already archived")
    item[b.f("item", "archived")] = True
    keys = [k for k, r in state.table(b.ent("record")).peek_items()  # type: ignore[attr-defined]
            if r[b.ref("record", "item")] == a["@item"]]
    for k in keys:
        b.get(state, "record", k)[b.f("record", "archived")] = True
    return {b.key("item"): a["@item"], "archived": True, "records_archived": len(keys)}


def _unarchive_record(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if (b.peek(state, "item", record[b.ref("record", "item")]) or {}).get(b.f("item", "archived")):
        raise Refusal(f"its {b.word('item')} is archived; a {b.word('record')} of it stays archived")
    record[b.f("record", "archived")] = False
    return {b.key("record"): a["@record"], "archived": False}


CASCADE_ARCHIVE = Mechanism(
    name="cascade_archive",
    rule="archiving an item archives all its records, and a record of an archived item cannot be unarchived",
    roles=("item", "record"),
    fields={"item": {"archived": FieldSpec(type="boolean")}, "record": {"archived": FieldSpec(type="boolean")}},
    tools=(
        ToolDef("archive_{item}", "Archive {a_item} and every {record} of it. Returns how many were archived.",
                {"@item": Arg("key", "the {item} id", "item")}, _archive, writes=("item", "record"),
                reaches="archived"),
        ToolDef("unarchive_{record}", "Bring {a_record} back from the archive; not while its {item} is archived.",
                {"@record": Arg("key", "the {record} id", "record")}, _unarchive_record, writes=("record",)),
    ),
    invariant=_archive_invariant, prepare=_archive_prepare, owns=("item.archived", "record.archived", "record.rows"),
    flows=(("archive_{item}", "unarchive_{record}"),),
)


# ---------------------------------------------------------------- nested_address
def _addr_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "addr")
    for r in b.each(state, "record"):
        r[b.f("record", "address")] = {"street": f"{rng.randint(1, 99)} {rng.choice(['Oak St', 'Elm Ave', 'Bay Rd'])}",
                                       "city": rng.choice(["Springfield", "Riverton", "Lakeside"]),
                                       "postcode": f"{rng.randint(10000, 99999)}"}


def _addr_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        addr = r[b.f("record", "address")]
        if not isinstance(addr, dict) or sorted(addr) != ["city", "postcode", "street"] or not (
                len(addr["postcode"]) == 5 and addr["postcode"].isdigit()) or addr["city"] in b.p("unserved"):
            return f"{key}: address {addr} is malformed or unserved"
    return None


def _set_address(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    addr = {k: str(a["address"][k]).strip() for k in ("street", "city", "postcode")}
    if addr["city"] in b.p("unserved"):
        raise Refusal(f"we do not serve {addr['city']}")
    record[b.f("record", "address")] = addr
    return {b.key("record"): a["@record"], "address": addr}


ADDRESS = Mechanism(
    name="nested_address",
    rule="an address is an object of street, city and a five-digit postcode, and only served cities are accepted",
    roles=("record",),
    fields={"record": {"address": FieldSpec(type="object", value={"street": "1 Main St", "city": "Springfield",
                                                                  "postcode": "10001"})}},
    params={"unserved": ["Farpoint", "Nowhere"]},
    tools=(ToolDef("change_{record}_address", "Replace the address of {a_record} (street, city, five-digit "
                   "postcode); cities outside the service area are refused.",
                   {"@record": Arg("key", "the {record} id", "record"), "address": Arg("address", "the new address")},
                   _set_address, writes=("record",)),),
    invariant=_addr_invariant, prepare=_addr_prepare, owns=("record.address",),
    flows=(("change_{record}_address",),),
    suits=("delivery", "shipment", "order", "moving", "repair", "visit", "pickup", "install", "service",
           "mail", "parcel", "property", "tenant", "home", "homeowner", "resident"),
)


# ---------------------------------------------------------------- many_to_many_links
def _links_prepare(b: Bound, state: State) -> None:
    for i in b.each(state, "item"):
        i[b.f("item", "followers")] = 0


def _links_invariant(b: Bound, state: State) -> str | None:
    pairs = Counter((str(x[b.key("party")]), str(x[b.key("item")])) for x in b.rows(state, "follows"))
    if pairs and max(pairs.values()) > 1:
        return "a link is stored twice"
    count = Counter(i for _, i in pairs)
    for key, i in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        if i[b.f("item", "followers")] != count[key]:
            return f"{key}: followers {i[b.f('item', 'followers')]} but {count[key]} links"
    return None


def _link(b: Bound, state: State, a: dict[str, Any]) -> Any:
    _exists(b, state, "party", a["@party"])
    item = b.usable(state, a["@item"])
    if any(x[b.key("party")] == a["@party"] and x[b.key("item")] == a["@item"] for x in b.rows(state, "follows")):
        raise Refusal(f"{a['@party']} already follows {a['@item']}")
    b.insert(state, "follows", {b.key("party"): a["@party"], b.key("item"): a["@item"]})
    item[b.f("item", "followers")] += 1
    return {b.key("item"): a["@item"], "followers": item[b.f("item", "followers")]}


def _unlink(b: Bound, state: State, a: dict[str, Any]) -> Any:
    found = next((k for k, x in state.table(b.ent("follows")).peek_items()  # type: ignore[attr-defined]
                  if x[b.key("party")] == a["@party"] and x[b.key("item")] == a["@item"]), None)
    if found is None:
        raise Refusal(f"{a['@party']} does not follow {a['@item']}", "not_found")
    b.delete(state, "follows", found)
    item = b.get(state, "item", a["@item"])
    item[b.f("item", "followers")] -= 1
    return {b.key("item"): a["@item"], "followers": item[b.f("item", "followers")]}


def _followed(b: Bound, state: State, a: dict[str, Any]) -> Any:
    _exists(b, state, "party", a["@party"])
    return sorted(str(x[b.key("item")]) for x in b.rows(state, "follows") if x[b.key("party")] == a["@party"])


LINKS = Mechanism(
    name="many_to_many_links",
    rule="a party follows an item at most once, and an item's follower count is its number of links",
    roles=("party", "item"),
    fields={"item": {"followers": FieldSpec(type="integer")}},
    tables=lambda b: b.log("follows", "follow_id", "FO", b.refs("party", "item")),
    params={"blocked_states": ["blocked"]},
    tools=(
        ToolDef("follow_{item}", "Make {a_party} follow {a_item} (once). Returns its follower count.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item")},
                _link, writes=("follows", "item")),
        ToolDef("unfollow_{item}", "Stop {a_party} following {a_item}.",
                {"@party": Arg("key", "the {party} id", "party"), "@item": Arg("key", "the {item} id", "item")},
                _unlink, writes=("follows", "item")),
        ToolDef("list_{party}_followed_{item}s", "The {item} ids {a_party} follows.",
                {"@party": Arg("key", "the {party} id", "party")}, _followed),
    ),
    invariant=_links_invariant, prepare=_links_prepare, owns=("follows.rows", "item.followers"),
    flows=(("follow_{item}", "list_{party}_followed_{item}s"), ("follow_{item}", "unfollow_{item}")),
)


# ---------------------------------------------------------------- hierarchy_no_cycles
def _tree_prepare(b: Bound, state: State) -> None:
    keys = sorted(state.table(b.ent("item")))
    rng = seeded(b, "tree")
    for i, key in enumerate(keys):  # each parent comes earlier in key order: a forest to start from
        b.get(state, "item", key)[b.f("item", "parent_id")] = rng.choice([None, *keys[:i]]) if i else None


def _ancestors(b: Bound, state: State, key: str) -> list[str]:
    seen: list[str] = []
    node = b.peek(state, "item", key)
    while node is not None and node[b.f("item", "parent_id")] is not None:
        up = str(node[b.f("item", "parent_id")])
        if up in seen or up == key:
            return [*seen, up, "<cycle>"]
        seen.append(up)
        node = b.peek(state, "item", up)
    return seen


def _tree_invariant(b: Bound, state: State) -> str | None:
    for key in state.table(b.ent("item")):
        if "<cycle>" in _ancestors(b, state, key):
            return f"{key} is its own ancestor"
    return None


def _move(b: Bound, state: State, a: dict[str, Any]) -> Any:
    item = b.get(state, "item", a["@item"])
    parent = a["new_parent_id"]
    _exists(b, state, "item", parent)
    if parent == a["@item"] or a["@item"] in _ancestors(b, state, parent):
        raise Refusal(f"{parent} is inside {a['@item']}; moving it there would make a loop")
    item[b.f("item", "parent_id")] = parent
    return {b.key("item"): a["@item"], "parent_id": parent, "path": [*reversed(_ancestors(b, state, a["@item"]))]}


TREE = Mechanism(
    name="hierarchy_no_cycles",
    rule="items form a tree: a move under one's own descendant (or itself) is refused",
    roles=("item",),
    fields={"item": {"parent_id": FieldSpec()}},
    tools=(
        ToolDef("move_{item}", "Move {a_item} under another {item}; refused when that would put it inside itself. "
                "Returns its new path from the top.",
                {"@item": Arg("key", "the {item} id", "item"),
                 "new_parent_id": Arg("key", "the new parent {item} id", "item")}, _move, writes=("item",)),
        ToolDef("get_{item}_path", "The ids from the top of the tree down to {a_item}'s parent.",
                {"@item": Arg("key", "the {item} id", "item")},
                lambda b, s, a: b.must(s, "item", a["@item"]) and [*reversed(_ancestors(b, s, a["@item"]))]),
    ),
    invariant=_tree_invariant, prepare=_tree_prepare, owns=("item.parent_id",),
    flows=(("get_{item}_path", "move_{item}"),),
    suits=("folder", "category", "catalog", "document", "file", "org", "department", "wiki", "page",
           "collection", "cms", "article", "publication", "report", "site", "protocol", "pipeline", "app"),
)


# ---------------------------------------------------------------- unique_handle
def _handle_prepare(b: Bound, state: State) -> None:
    for n, p in enumerate(b.each(state, "party")):
        p[b.f("party", "handle")] = f"user{n:03d}"


def _handle_invariant(b: Bound, state: State) -> str | None:
    seen = Counter(str(p[b.f("party", "handle")]).lower() for p in b.rows(state, "party"))
    dup = [h for h, n in seen.items() if n > 1]
    return f"handle {dup[0]} is taken twice" if dup else None


def _rename(b: Bound, state: State, a: dict[str, Any]) -> Any:
    party = b.get(state, "party", a["@party"])
    new = a["handle"].strip()
    if any(str(p[b.f("party", "handle")]).lower() == new.lower() and p[b.key("party")] != a["@party"]
           for p in b.rows(state, "party")):
        raise Refusal(f"the handle {new} is taken")
    party[b.f("party", "handle")] = new
    return {b.key("party"): a["@party"], "handle": new}


UNIQUE = Mechanism(
    name="unique_handle",
    rule="handles are unique regardless of case; a change to one already taken is refused",
    roles=("party",),
    fields={"party": {"handle": FieldSpec()}},
    tools=(ToolDef("change_{party}_handle", "Change the public handle of {a_party}; refused if another {party} "
                   "has it (case does not matter).",
                   {"@party": Arg("key", "the {party} id", "party"), "handle": Arg("text", "the new handle")}, _rename,
                   writes=("party",)),),
    invariant=_handle_invariant, prepare=_handle_prepare, owns=("party.handle",),
    flows=(("change_{party}_handle",),),
    suits=("forum", "social", "community", "game", "profile", "account", "member", "player", "club",
           "creator", "esports", "captain", "fan", "developer", "app", "editor", "webmaster", "analyst",
           "engineer"),
)


# ---------------------------------------------------------------- soft_delete_restore
def _soft_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "removed")] = False
        r[b.f("record", "restore_count")] = 0


def _soft_invariant(b: Bound, state: State) -> str | None:
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "restore_count")] > b.p("max_restores"):
            return f"{key} was restored more than {b.p('max_restores')} times"
    return None


def _remove(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if record[b.f("record", "removed")]:
        raise Refusal(f"{b.word('record')} {a['@record']} is already in the bin")
    record[b.f("record", "removed")] = True
    return {b.key("record"): a["@record"], "removed": True}


def _restore(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if not record[b.f("record", "removed")]:
        raise Refusal(f"{b.word('record')} {a['@record']} is not in the bin")
    if record[b.f("record", "restore_count")] >= b.p("max_restores"):
        raise Refusal(f"{b.word('record')} {a['@record']} has been restored {b.p('max_restores')} times already")
    record[b.f("record", "removed")] = False
    record[b.f("record", "restore_count")] += 1
    return {b.key("record"): a["@record"], "removed": False}


def _binned(b: Bound, state: State, a: dict[str, Any]) -> Any:
    b.must(state, "party", a["@party"])
    return sorted(str(r[b.key("record")]) for r in b.rows(state, "record")
                  if r[b.f("record", "removed")] and r[b.ref("record", "party")] == a["@party"])


SOFT_DELETE = Mechanism(
    name="soft_delete_restore",
    rule="a removed record goes to a bin and can be restored from it, at most a fixed number of times",
    roles=("party", "record"),
    fields={"record": {"removed": FieldSpec(type="boolean"), "restore_count": FieldSpec(type="integer")}},
    params={"max_restores": 2},
    tools=(
        ToolDef("bin_{record}", "Move {a_record} to the bin (it can be restored).",
                {"@record": Arg("key", "the {record} id", "record")}, _remove, writes=("record",)),
        ToolDef("restore_{record}", "Restore {a_record} from the bin; at most {max_restores} times per {record}.",
                {"@record": Arg("key", "the {record} id", "record")}, _restore, writes=("record",)),
        ToolDef("list_{party}_bin", "The {record} ids of {a_party} in the bin.",
                {"@party": Arg("key", "the {party} id", "party")}, _binned),
    ),
    invariant=_soft_invariant, prepare=_soft_prepare, owns=("record.removed", "record.restore_count"),
    flows=(("list_{party}_bin", "restore_{record}"), ("bin_{record}", "restore_{record}")),
)


# ---------------------------------------------------------------- optimistic_versioning
def _ver_prepare(b: Bound, state: State) -> None:
    for r in b.each(state, "record"):
        r[b.f("record", "version")] = 1


def _ver_invariant(b: Bound, state: State) -> str | None:
    edits = Counter(str(x[b.key("record")]) for x in b.rows(state, "revisions"))
    for key, r in state.table(b.ent("record")).peek_items():  # type: ignore[attr-defined]
        if r[b.f("record", "version")] != 1 + edits[key]:
            return f"{key}: version {r[b.f('record', 'version')]} after {edits[key]} edits"
    return None


def _edit(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    if int(a["expected_version"]) != record[b.f("record", "version")]:
        raise Refusal(f"{b.word('record')} {a['@record']} is at version {record[b.f('record', 'version')]}, not "
                      f"{a['expected_version']}; read it again")
    b.insert(state, "revisions", {b.key("record"): a["@record"], "before": record.get(b.f("record", "memo")),
                                  "after": a["memo"]})
    record[b.f("record", "memo")] = a["memo"]
    record[b.f("record", "version")] += 1
    return {b.key("record"): a["@record"], "version": record[b.f("record", "version")]}


VERSIONS = Mechanism(
    name="optimistic_versioning",
    rule="an edit must name the version it read; a stale version is refused, and each edit adds a revision",
    roles=("record",),
    fields={"record": {"memo": FieldSpec(choices=["", "handle with care", "urgent"]),
                       "version": FieldSpec(type="integer", value=1)}},
    tables=lambda b: b.log("revisions", "revision_id", "RV", {**b.refs("record"), "before": FieldSpec(),
                                                              "after": FieldSpec()}),
    tools=(
        ToolDef("get_{record}_version", "The memo of {a_record} and the version to edit it at.",
                {"@record": Arg("key", "the {record} id", "record")},
                lambda b, s, a: {k: b.must(s, "record", a["@record"]).get(b.f("record", k))
                                 for k in ("memo", "version")}),
        ToolDef("edit_{record}_memo", "Replace the memo of {a_record}; give the version you read (a stale one is "
                "refused). Returns the new version.",
                {"@record": Arg("key", "the {record} id", "record"), "memo": Arg("text", "the memo"),
                 "expected_version": Arg("int", "the version read", lo=1, hi=20)}, _edit,
                writes=("record", "revisions")),
    ),
    invariant=_ver_invariant, prepare=_ver_prepare, owns=("record.version", "record.memo", "revisions.rows"),
    flows=(("get_{record}_version", "edit_{record}_memo"),),
)


# ---------------------------------------------------------------- split_merge_lots
def _lots_prepare(b: Bound, state: State) -> None:
    rng = seeded(b, "lots")
    parties, items = sorted(state.table(b.ent("party"))), sorted(state.table(b.ent("item")))
    issued: Counter[str] = Counter()
    for _ in range(min(12, len(parties) * 2)):
        item, units = rng.choice(items), rng.randint(2, 20)
        b.insert(state, "lots", {b.key("party"): rng.choice(parties), b.key("item"): item, "units": units})
        issued[item] += units
    for i in b.each(state, "item"):
        i[b.f("item", "units_issued")] = issued[i[b.key("item")]]


def _lots_invariant(b: Bound, state: State) -> str | None:
    held: Counter[str] = Counter()
    for lot in b.rows(state, "lots"):
        if lot["units"] <= 0:
            return f"lot {lot['lot_id']} is empty"
        held[str(lot[b.key("item")])] += lot["units"]
    for key, i in state.table(b.ent("item")).peek_items():  # type: ignore[attr-defined]
        if i[b.f("item", "units_issued")] != held[key]:
            return f"{key}: {held[key]} units in lots, {i[b.f('item', 'units_issued')]} issued"
    return None


def _split(b: Bound, state: State, a: dict[str, Any]) -> Any:
    lot = b.get(state, "lots", a["lot_id"])
    units = int(a["units"])
    if units >= lot["units"]:
        raise Refusal(f"lot {a['lot_id']} holds {lot['units']} units; a split must leave some")
    lot["units"] -= units
    made = b.insert(state, "lots", {b.key("party"): lot[b.key("party")], b.key("item"): lot[b.key("item")],
                                    "units": units})
    return {"lot_id": a["lot_id"], "units": lot["units"], "new_lot_id": made["lot_id"]}


def _merge(b: Bound, state: State, a: dict[str, Any]) -> Any:
    keep, gone = b.get(state, "lots", a["lot_id"]), b.get(state, "lots", a["other_lot_id"])
    if a["lot_id"] == a["other_lot_id"] or keep[b.key("item")] != gone[b.key("item")] or \
            keep[b.key("party")] != gone[b.key("party")]:
        raise Refusal("only two different lots of the same holder and the same item can be merged")
    keep["units"] += gone["units"]
    b.delete(state, "lots", a["other_lot_id"])
    return {"lot_id": a["lot_id"], "units": keep["units"]}


LOTS = Mechanism(
    name="split_merge_lots",
    rule="splitting and merging lots conserves every item's issued units; merges need one holder and one item",
    roles=("party", "item"),
    fields={"item": {"units_issued": FieldSpec(type="integer")}},
    tables=lambda b: b.log("lots", "lot_id", "LT", {**b.refs("party", "item"), "units": FieldSpec(type="integer")}),
    tools=(
        ToolDef("split_{item}_lot", "Split units off a lot into a new lot of the same holder. Returns both ids.",
                {"lot_id": Arg("key", "the lot id", "lots"), "units": Arg("int", "units to split off", lo=1, hi=20)},
                _split, writes=("lots",)),
        ToolDef("merge_{item}_lots", "Merge the second lot into the first (same holder, same {item}).",
                {"lot_id": Arg("key", "the lot kept", "lots"), "other_lot_id": Arg("key", "the lot merged", "lots")},
                _merge, writes=("lots",)),
        ToolDef("list_{party}_lots", "The lots {a_party} holds.", {"@party": Arg("key", "the {party} id", "party")},
                lambda b, s, a: b.must(s, "party", a["@party"]) and [
                    x for x in b.rows(s, "lots") if x[b.key("party")] == a["@party"]]),
    ),
    invariant=_lots_invariant, prepare=_lots_prepare, owns=("lots.rows", "item.units_issued"),
    flows=(("list_{party}_lots", "split_{item}_lot", "merge_{item}_lots"),),
    suits=("share", "stock", "warehouse", "seed", "inventory", "batch", "harvest", "wine", "lot", "fund",
           "production", "equity", "order", "trader", "medication"),
)


# ---------------------------------------------------------------- rollup_total
def _rollup_prepare(b: Bound, state: State) -> None:
    sums: defaultdict[str, float] = defaultdict(float)
    for r in b.rows(state, "record"):
        sums[str(r[b.ref("record", "party")])] += r[b.f("record", "charge_amount")]
    for p in b.each(state, "party"):
        p[b.f("party", "total_charged")] = money(sums[p[b.key("party")]])


def _rollup_invariant(b: Bound, state: State) -> str | None:
    sums: defaultdict[str, float] = defaultdict(float)
    for r in b.rows(state, "record"):
        sums[str(r[b.ref("record", "party")])] += r[b.f("record", "charge_amount")]
    for key, p in state.table(b.ent("party")).peek_items():  # type: ignore[attr-defined]
        if p[b.f("party", "total_charged")] != money(sums[key]):
            return f"{key}: total {p[b.f('party', 'total_charged')]} but records sum to {money(sums[key])}"
    return None


def _recharge(b: Bound, state: State, a: dict[str, Any]) -> Any:
    record = b.get(state, "record", a["@record"])
    party = b.get(state, "party", record[b.ref("record", "party")])
    new = money(float(a["amount"]))
    party[b.f("party", "total_charged")] = money(party[b.f("party", "total_charged")] - record[
        b.f("record", "charge_amount")] + new)
    record[b.f("record", "charge_amount")] = new
    return {b.key("record"): a["@record"], "charge_amount": new, "total_charged": party[b.f("party", "total_charged")]}


ROLLUP = Mechanism(
    name="rollup_total",
    rule="a party's total charged is always the sum of its records' charges, updated by every charge change",
    roles=("party", "record"),
    fields={"party": {"total_charged": FieldSpec(type="number")},
            "record": {"charge_amount": FieldSpec(type="number", min=10, max=300, decimals=2)}},
    tools=(
        ToolDef("change_{record}_charge", "Change the charge of {a_record}; its {party}'s total follows. Returns "
                "both.", {"@record": Arg("key", "the {record} id", "record"),
                          "amount": Arg("number", "the new charge", lo=0, hi=500)}, _recharge,
                writes=("record", "party")),
        ToolDef("get_{party}_total_charged", "The total charged to {a_party} over all their {record}s.",
                {"@party": Arg("key", "the {party} id", "party")},
                lambda b, s, a: {"total_charged": b.must(s, "party", a["@party"]).get(
                    b.f("party", "total_charged"))}),
    ),
    invariant=_rollup_invariant, prepare=_rollup_prepare,
    owns=("party.total_charged", "record.charge_amount", "record.party", "record.rows"),
    flows=(("change_{record}_charge", "get_{party}_total_charged"),),
)

MECHANISMS = (CASCADE_DELETE, CASCADE_ARCHIVE, ADDRESS, LINKS, TREE, UNIQUE, SOFT_DELETE, VERSIONS, LOTS, ROLLUP)
