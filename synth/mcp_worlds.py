"""MCP-grounded worlds: harvested MCP tool schemas mapped onto entity operations of a data model.

A tool is mapped when its name reads as `<verb>_<entity>` (after the server's common prefix: `git_create_branch`
is `create branch`) with a verb of an entity operation, and its schema fits that operation: every argument a
scalar, a get or delete keyed by its one required argument, no argument the simulator would silently ignore. The
entity's fields are the arguments of its mapped tools (and the properties of a declared output schema); its seeded
records are generated from the field names' types. Mapped tools keep their harvested name, description and schema,
and run as declarative effects over the world state, so tasks on them are verified like synthetic ones. Every other
tool is listed with the reason it was not mapped.

Labels are conservative: `read_only` only where the mapping proves it (a get, list or search effect), never from the
server's annotations alone; `destructive` for update and delete, or where the server says so; `reads_untrusted` and
`egress` where the server declares an open world.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envgym.world.spec import (
    Effect,
    EntitySpec,
    FieldSpec,
    Filter,
    PolicyRules,
    ToolLabel,
    ToolSpec,
    WorldSpec,
)
from synth.lexicon import CITIES, NOTES, WORDS, plural, words

READS = {"get": "get", "read": "get", "show": "get", "fetch": "get", "describe": "get", "view": "get",
         "list": "list", "find": "search", "search": "search", "query": "search"}
WRITES = {"create": "create", "add": "create", "insert": "create", "new": "create", "make": "create",
          "update": "update", "edit": "update", "modify": "update", "rename": "update",
          "delete": "delete", "remove": "delete"}
QUERY_ARGS = ("query", "q", "pattern", "search", "keyword", "text")
QUALIFIERS = ("with", "by", "for", "from", "to", "in", "as")
SUFFIXES = ("info", "details", "metadata")
SCALARS = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean"}
TIMEZONES = ["UTC", "Europe/London", "Europe/Lisbon", "Europe/Berlin", "America/New_York", "America/Chicago",
             "America/Los_Angeles", "Asia/Tokyo", "Asia/Kolkata", "Australia/Sydney", "Africa/Lagos",
             "America/Sao_Paulo"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
RECORDS = 8


class ToolMapping(BaseModel):
    """How one harvested tool maps onto the data model, or why it does not (`reason`)."""

    model_config = ConfigDict(extra="forbid")

    server: str
    tool: str
    mapped: bool
    op: str | None = None
    entity: str | None = None
    key: str | None = Field(None, description="the argument naming the record (get, update, delete, create)")
    reason: str = ""
    labels: list[ToolLabel] = Field(default_factory=list)


def _tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return [t.lower() for t in re.split(r"[^A-Za-z0-9]+", spaced) if t]


def _singular(noun: str) -> str:
    head, _, last = noun.rpartition("_")
    for many, one in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"), ("s", "")):
        if last.endswith(many) and not last.endswith("ss") and len(last) > len(many) + 1:
            last = last[: -len(many)] + one
            break
    return f"{head}_{last}" if head else last


def _scalar(schema: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """(field type, enum choices) of a scalar argument schema (a nullable scalar too), else None."""
    if "enum" in schema and all(isinstance(v, str | int | float | bool) for v in schema["enum"]):
        return "string" if all(isinstance(v, str) for v in schema["enum"]) else "number", list(schema["enum"])
    options = schema.get("anyOf") or schema.get("oneOf")
    if options:
        typed = [o for o in options if o.get("type") != "null"]
        return _scalar(typed[0]) if len(typed) == 1 else None
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    return (SCALARS[kind], []) if isinstance(kind, str) and kind in SCALARS else None


def _labels(op: str, annotations: dict[str, Any]) -> list[ToolLabel]:
    labels: list[ToolLabel] = []
    if op in ("get", "list", "search"):
        labels.append("read_only")
    elif op in ("update", "delete") or annotations.get("destructive_hint"):
        labels.append("destructive")
    if annotations.get("open_world_hint"):
        labels.append("reads_untrusted")
        if op not in ("get", "list", "search"):
            labels.append("egress")
    return labels


def _common_prefix(specs: Sequence[ToolSpec]) -> str | None:
    firsts = {(_tokens(s.name) or [""])[0] for s in specs}
    return firsts.pop() if len(specs) > 1 and len(firsts) == 1 and all(len(_tokens(s.name)) > 1 for s in specs) else None


def map_tool(spec: ToolSpec, prefix: str | None) -> ToolMapping:
    """The mapping of one tool read from its name and schema alone (entity keys are reconciled by `map_server`)."""
    source = spec.source or {}
    base = {"server": str(source.get("server_name", "?")), "tool": spec.name}
    tokens = _tokens(spec.name)
    if prefix is not None and tokens[:1] == [prefix]:
        tokens = tokens[1:]
    verb, rest = (tokens[0], tokens[1:]) if tokens else ("", [])
    op = READS.get(verb) or WRITES.get(verb)
    if op is None:
        return ToolMapping(**base, mapped=False, reason=f"{verb or spec.name!r} is not an entity operation "
                           "(get, list, search, create, update, delete)")
    qualifier = next((t for t in rest if t in QUALIFIERS), None)
    if qualifier is not None:
        tail = " ".join(rest[rest.index(qualifier):])
        return ToolMapping(**base, mapped=False, reason=f"the qualifier {tail!r} changes what it does in a way the "
                           "data model does not simulate")
    while rest and rest[-1] in SUFFIXES and len(rest) > 1:
        rest = rest[:-1]
    if not rest:
        return ToolMapping(**base, mapped=False, reason=f"no entity is named after the verb {verb!r}")
    entity = _singular("_".join(rest))
    props: dict[str, Any] = spec.parameters.get("properties", {})
    required = [r for r in spec.parameters.get("required", []) if r in props]
    for name, schema in props.items():
        if _scalar(schema) is None:
            kind = schema.get("type") or "a union"
            return ToolMapping(**base, mapped=False, entity=entity, reason=f"argument {name!r} is {kind}, not a "
                               "scalar field value")
    key: str | None = None
    if op in ("get", "delete", "update"):
        if not required:
            return ToolMapping(**base, mapped=False, entity=entity, reason=f"a {op} needs a required argument "
                               "naming the record")
        key = _key_argument(entity, required)
        extra = [p for p in props if p != key]
        if op != "update" and extra:
            return ToolMapping(**base, mapped=False, entity=entity, reason=f"argument {extra[0]!r} changes what "
                               f"the {op} does, and the data model has nothing it could mean")
        if op == "update" and not extra:
            return ToolMapping(**base, mapped=False, entity=entity, reason="an update with nothing to set")
    elif op == "create":
        candidates = [p for p in required if p in _key_names(entity)]
        key = candidates[0] if candidates else None
    return ToolMapping(**base, mapped=True, op=op, entity=entity, key=key,
                       labels=_labels(op, source.get("annotations", {})))


def _key_names(entity: str) -> list[str]:
    last = entity.rpartition("_")[2]
    return [f"{entity}_id", f"{last}_id", "id", f"{entity}_name", f"{last}_name", "name", "path", "key", "uri"]


def _key_argument(entity: str, required: list[str]) -> str:
    named = [r for r in required if r in _key_names(entity)]
    return named[0] if named else required[0]


def map_server(specs: Sequence[ToolSpec]) -> list[ToolMapping]:
    """Every tool of one server, mapped or not. An entity is keyed by the argument its first keyed tool names;
    a later tool that names its records by another argument is not mapped."""
    prefix = _common_prefix(specs)
    mappings = [map_tool(s, prefix) for s in specs]
    keys: dict[str, str] = {}
    for m in sorted(mappings, key=lambda m: m.op == "create"):  # get/update/delete decide the key first
        if not m.mapped or m.entity is None or m.key is None:
            continue
        known = keys.setdefault(m.entity, m.key)
        if known != m.key:
            m.mapped, m.reason = False, (f"entity {m.entity!r} is named by {known!r} elsewhere; this tool names it "
                                         f"by {m.key!r}")
    for m in mappings:
        if m.mapped and m.op == "create" and m.entity in keys and m.key is None:
            m.mapped, m.reason = False, f"a create without the argument {keys[m.entity]!r} that names the record"
    _unmap_listing_options(specs, mappings)
    return mappings


def _unmap_listing_options(specs: Sequence[ToolSpec], mappings: list[ToolMapping]) -> None:
    """A list or search argument is a filter only on a field that another tool of the entity sets or returns: an
    option of the listing itself (`list_todos(include_completed)`) would otherwise become a field of every record,
    and the simulated listing would ignore what it does."""
    by_name = {s.name: s for s in specs}
    fields: dict[str, set[str]] = {}
    for m in mappings:
        if m.mapped and m.entity is not None and m.op not in ("list", "search"):
            spec = by_name[m.tool]
            output = (spec.source or {}).get("output_schema") or {}
            fields.setdefault(m.entity, set()).update(spec.parameters.get("properties", {}),
                                                      output.get("properties", {}) if m.op == "get" else ())
    for m in mappings:
        if not m.mapped or m.op not in ("list", "search") or m.entity is None:
            continue
        options = [a for a in by_name[m.tool].parameters.get("properties", {})
                   if a not in QUERY_ARGS and a not in fields.get(m.entity, set())]
        if options:
            m.mapped, m.reason = False, (f"argument {options[0]!r} is an option of the listing, not a field that "
                                         f"another tool of {m.entity!r} sets or returns: the data model has nothing "
                                         "it could filter")


def _values(name: str, kind: str, choices: list[Any], entity: str) -> FieldSpec:
    """Seeded values of a field, chosen by its type and what its name says it holds."""
    if choices:
        return FieldSpec.model_validate({"type": kind, "choices": choices})
    if kind == "boolean":
        return FieldSpec(type="boolean", choices=[True, False])
    if kind == "integer":
        return FieldSpec(type="integer", min=1, max=60)
    if kind == "number":
        return FieldSpec(type="number", min=1, max=500, decimals=2)
    if "timezone" in name or name.endswith("_tz"):
        return FieldSpec(choices=TIMEZONES)
    if name.startswith("day"):
        return FieldSpec(choices=DAYS)
    if "time" in name or "date" in name:
        return FieldSpec(choices=[f"2025-{m:02d}-{d:02d}T{h:02d}:{mm:02d}:00" for m, d, h, mm in
                                  ((3, 4, 9, 15), (5, 17, 14, 0), (7, 2, 18, 45), (9, 23, 7, 30), (11, 8, 21, 5),
                                   (12, 30, 12, 0))])
    if "path" in name or name in ("source", "destination", "file", "directory"):
        return FieldSpec(template=f"/srv/{plural(entity)}/" + "{index:02d}", unique=True)
    if "city" in name or "location" in name:
        return FieldSpec(choices=CITIES)
    if name.endswith(("name", "title", "label", "branch")):
        return FieldSpec(choices=[f"{w}-{entity.replace('_', '-')}" for w in WORDS], unique=True)
    return FieldSpec(choices=NOTES)


def mcp_world(name: str, server: str, specs: Sequence[ToolSpec], mappings: Sequence[ToolMapping], seed: int,
              max_steps: int = 40) -> WorldSpec:
    """The world of one server's mapped tools: one entity per mapped noun, effects over it, the standard rules."""
    by_name = {s.name: s for s in specs}
    mapped = [m for m in mappings if m.mapped and m.entity is not None]
    fields: dict[str, dict[str, tuple[str, list[Any]]]] = {}
    keys: dict[str, str] = {}
    for m in mapped:
        assert m.entity is not None
        spec = by_name[m.tool]
        table = fields.setdefault(m.entity, {})
        if m.key is not None:
            keys[m.entity] = m.key
        for arg, schema in spec.parameters.get("properties", {}).items():
            scalar = _scalar(schema)
            if scalar is not None and not (m.op in ("list", "search") and arg in QUERY_ARGS):
                table.setdefault(arg, scalar)
        output = (spec.source or {}).get("output_schema") or {}
        for prop, schema in output.get("properties", {}).items() if m.op == "get" else ():
            scalar = _scalar(schema)
            if scalar is not None:
                table.setdefault(prop, scalar)
    entities: dict[str, EntitySpec] = {}
    for entity, table in fields.items():
        key = keys.get(entity, f"{entity}_id")
        specs_of = {f: _values(f, kind, choices, entity) for f, (kind, choices) in table.items()}
        key_spec = specs_of.pop(key, FieldSpec())
        if key_spec.choices:  # a key drawn from choices: faker's random_element, unique, instead of key_format
            key_spec = FieldSpec(faker="random_element", faker_args={"elements": key_spec.choices}, unique=True)
        count = min(RECORDS, len(key_spec.choices or key_spec.faker_args.get("elements", [])) or RECORDS)
        entities[plural(entity)] = EntitySpec(key=key, prefix=f"{entity[:3].upper()}-", count=count,
                                              fields={key: key_spec, **specs_of},
                                              description=f"{words(plural(entity))} behind {server}")
    tools = [_tool(by_name[m.tool], m, keys) for m in mapped]
    writes = [t.name for t in tools if not t.read_only]
    policy = "\n".join([
        f"- Before each change ({', '.join(writes) or 'none here'}), say what you will do and get an explicit yes.",
        "- Make no change the user did not ask for; one change per confirmation.",
        "- Use only values you were given or that a tool returned; answer with the exact value, once."])
    return WorldSpec(
        name=name, description=f"[mcp] The tools of the MCP server {server}, simulated over a data model.",
        seed=seed, entities=entities, tools=tools, policy=policy, max_steps=max_steps,
        system_prompt=f"You are an assistant with the tools of {server}. Use only the tools below and follow the "
                      "policy.",
        rules=PolicyRules(confirm_writes=True, no_unrequested_writes=True),
        meta={"mcp": {"server": server, "mappings": [m.model_dump(mode="json") for m in mappings]}})


def _tool(spec: ToolSpec, m: ToolMapping, keys: dict[str, str]) -> ToolSpec:
    assert m.entity is not None and m.op is not None
    props = spec.parameters.get("properties", {})
    entity = plural(m.entity)
    effect: dict[str, Any] = {"op": m.op, "entity": entity}
    if m.op in ("get", "update", "delete"):
        effect["key_arg"] = m.key
    if m.op in ("create", "update"):
        effect["set"] = {a: f"${a}" for a in props if a != m.key or m.op == "create"}
    if m.op in ("list", "search"):
        query = next((a for a in props if a in QUERY_ARGS), None)
        if query is not None:
            effect["op"], effect["query_arg"] = "search", query
        effect["filters"] = [Filter(field=a, arg=a).model_dump() for a in props if a != query]
    if m.op == "search" and "query_arg" not in effect:
        effect["op"] = "list"
    # "python": None: model_copy skips validation, and a harvested spec must never keep a code reference.
    return spec.model_copy(update={"effect": Effect.model_validate(effect), "python": None, "labels": m.labels,
                                   "source": {**(spec.source or {}), "mapped": m.op}})
