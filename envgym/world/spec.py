"""The world file format: pydantic models for world.yaml and tasks.jsonl.

A world is entities (tables of typed records seeded with faker), tools over them (declarative effects or Python
functions), a policy text and tasks. `envgym schema` prints the JSON Schema of these models; envgym.world.files reads and writes them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

ToolLabel = Literal["read_only", "destructive", "reads_untrusted", "egress"]
FieldType = Literal["string", "integer", "number", "boolean", "list", "object"]
EffectOp = Literal["get", "list", "search", "create", "update", "delete", "aggregate", "update_many"]
Aggregate = Literal["count", "sum", "min", "max"]
CompareOp = Literal["eq", "ne", "lt", "le", "gt", "ge", "in", "not_in", "contains", "exists", "not_exists"]


class SpecError(ValueError):
    """A world or task file that does not match the format; the message names the file and the path inside it."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldSpec(_Model):
    """One typed field of an entity and how its seeded values are generated."""

    type: FieldType = "string"
    description: str = ""
    faker: str | None = Field(None, description="Faker provider, e.g. 'email', 'name', 'street_address'.")
    faker_args: dict[str, Any] = Field(default_factory=dict)
    choices: list[Any] | None = Field(None, description="Pick one value uniformly from these.")
    min: float | None = None
    max: float | None = None
    decimals: int | None = Field(None, description="Round generated numbers to this many decimals.")
    ref: str | None = Field(None, description="Entity whose key this field holds (a foreign key).")
    ref_count: tuple[int, int] | None = Field(None, description="For list refs: how many keys, [min, max].")
    template: str | None = Field(
        None, description="A format string over the record's earlier fields and `index`."
    )
    value: Any = Field(None, description="A constant value.")
    unique: bool = False


class EntitySpec(_Model):
    """A table of records: a key field, typed fields and how many records the seeded world holds."""

    key: str
    key_format: str = Field(
        "{prefix}{index:04d}", description="Format of generated keys; {prefix} and {index}."
    )
    prefix: str = ""
    count: int = Field(10, ge=0)
    fields: dict[str, FieldSpec]
    description: str = ""

    @model_validator(mode="after")
    def _key_is_a_field(self) -> EntitySpec:
        if self.key not in self.fields:
            raise ValueError(f"key {self.key!r} is not one of the fields {sorted(self.fields)}")
        return self


class Precondition(_Model):
    """A check on the target record before a write; `error` is the message the agent sees when it fails."""

    field: str
    op: CompareOp = "eq"
    value: Any = None
    error: str


class Filter(_Model):
    """A predicate of list/search/aggregate/update_many: `record[field] <op> $arg`, skipped when the argument is
    absent (an optional filter). `arg` names a tool argument; `a.b` reads field b of the object argument a."""

    field: str
    op: CompareOp = "eq"
    arg: str


class Effect(_Model):
    """A declarative tool effect over one entity.

    Values in `match` and `set` that are strings starting with `$` name a tool argument (`$order_id`); `$$` escapes a
    literal dollar. `key_arg` names the argument holding the record's key for get/update/delete.
    """

    op: EffectOp
    entity: str
    key_arg: str | None = None
    match: dict[str, Any] = Field(
        default_factory=dict, description="get/list: field -> value that must be equal."
    )
    query_arg: str | None = Field(None, description="search: argument holding the text to look for.")
    search_fields: list[str] = Field(default_factory=list)
    set: dict[str, Any] = Field(default_factory=dict, description="create/update: field -> value.")
    preconditions: list[Precondition] = Field(default_factory=list)
    returns: str | list[str] | None = Field(None, description="Return only this field (or these fields).")
    limit: int = 50
    not_found_error: str | None = Field(
        None, description="Message when no record matches; default names both."
    )
    filters: list[Filter] = Field(default_factory=list, description="list/search/aggregate/update_many predicates.")
    sort_by: str | None = Field(None, description="Sort rows by this field, or by the field named by '$arg'.")
    order: str = Field("asc", description="'asc', 'desc', or '$arg' holding one of them.")
    page_arg: str | None = Field(None, description="Argument with the 1-based page number (pages of `limit`).")
    aggregate: Aggregate | None = Field(None, description="aggregate: count, sum, min or max.")
    aggregate_field: str | None = Field(None, description="aggregate: the numeric field summed or compared.")
    group_by: str | None = Field(None, description="aggregate: one result per value of this field.")
    expand: list[str] = Field(
        default_factory=list, description="Reference fields whose record is joined in under the field name less _id."
    )
    check_refs: bool = Field(False, description="create: every reference argument must name an existing record.")


class ToolFaults(_Model):
    """A tool's failure modes, played by the env in episodes (never by replays or checks). A failed call changes
    nothing and may be retried as it was; the call right after a failed one of the same tool always goes through."""

    transient: float = Field(
        0.0, ge=0.0, le=1.0, description="Chance a call fails transiently (drawn from the episode's seeded rng)."
    )
    rate_limit: int | None = Field(
        None, ge=1, description="Calls that go through before the next one is refused as rate limited."
    )


class MechanismUse(_Model):
    """A business mechanism a world uses (see envgym.world.mechanisms): its catalogue name, the world's tables and
    fields it works over (`bind`: slot -> entity or field name; unbound slots keep their own names) and its
    parameters. `id` is what the world's tools name in `mechanism.use`."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    mechanism: str
    bind: dict[str, str] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


class MechanismTool(_Model):
    """A tool implemented by a mechanism the world uses: the use's id and which of the mechanism's tools."""

    use: str
    role: str


class ToolSpec(_Model):
    """A tool the agent may call: JSON Schema parameters and either an effect, a mechanism or a Python
    implementation."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    description: str
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}, "additionalProperties": False}
    )
    labels: list[ToolLabel] = Field(default_factory=list)
    effect: Effect | None = None
    python: str | None = Field(
        None, description="'module:function' in the environment folder, e.g. 'tools:refund'."
    )
    mechanism: MechanismTool | None = Field(
        None, description="A tool of a mechanism the world uses (world.mechanisms): library code, no folder code."
    )
    writes: list[str] | None = Field(
        None, description="Entities a Python tool may change (checked by synth)."
    )
    source: dict[str, Any] | None = Field(
        None, description="Where an imported tool came from (e.g. an MCP server)."
    )
    faults: ToolFaults | None = Field(None, description="Failure modes the env plays (rate limit, transient).")

    @model_validator(mode="after")
    def _one_implementation(self) -> ToolSpec:
        given = sum(x is not None for x in (self.effect, self.python, self.mechanism))
        if given > 1 or (given == 0 and self.source is None):
            raise ValueError(f"tool {self.name!r} needs exactly one of 'effect', 'mechanism' or 'python'")
        if self.parameters.get("type") != "object":
            raise ValueError(f"tool {self.name!r}: parameters must be a JSON Schema with type 'object'")
        return self

    @property
    def read_only(self) -> bool:
        if "read_only" in self.labels:
            return True
        return self.effect is not None and self.effect.op in ("get", "list", "search")


class ToolCall(_Model):
    """One call of a tool by name with JSON arguments (a step of a reference solution)."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class Assertion(_Model):
    """A check on the final world state: `entity[key].field <op> value`, or that a record exists."""

    entity: str
    key: str | None = None
    match: dict[str, Any] = Field(
        default_factory=dict, description="Find the record by fields instead of key."
    )
    field: str | None = None
    op: CompareOp = "eq"
    value: Any = None
    description: str = ""


AnswerType = Literal["number", "money", "id", "enum", "date", "time", "text"]


class Answer(_Model):
    """An exact value the task asks for, checked in the agent's replies to the user (see envgym.rewards.answers).

    `type` says how it is matched: numbers and money by value ("412.5" == "$412.50", "1,280" == "1280"), ids and
    enums without regard to case, dates and times by the day and clock time they name, text as a phrase. `choices`
    are the answer's plausible values (for an enum, its values): naming any choice other than an expected one fails.
    """

    value: str
    type: AnswerType = "text"
    choices: list[str] = Field(default_factory=list)
    # Left out of dumps at their defaults, so task files written before these fields existed stay byte-identical.
    extra_values: int = Field(0, ge=0, exclude_if=lambda v: v == 0, description="Other values of this type an "
                              "honest final reply may say beside the answer (0: none, so a hedge fails); more than 0 "
                              "needs `extra_reason`.")
    extra_reason: str | None = Field(None, exclude_if=lambda v: v is None,
                                     description="Why an honest reply says `extra_values` other values.")

    @model_validator(mode="after")
    def _enum_has_choices(self) -> Answer:
        if self.type == "enum" and not self.choices:
            raise ValueError(f"enum answer {self.value!r} needs its choices (the enum's values)")
        if self.extra_values and not (self.extra_reason or "").strip():
            raise ValueError(f"answer {self.value!r} allows {self.extra_values} extra values without an extra_reason")
        return self


class PolicyRules(_Model):
    """The policy's rules that the rubric checks on the trajectory (see envgym.rewards.rules).

    Every rule is off unless declared; `rules:` in world.yaml turns them on for every task of the world.
    """

    authenticate_with: list[str] = Field(
        default_factory=list, description="Tools whose successful call authenticates the user."
    )
    requires_auth: list[str] | None = Field(
        None,
        description="Tools that access account data and may be called only after authentication; "
        "unset: every tool except the authenticate_with ones (when any are declared).",
    )
    identity: str | None = Field(
        None, description="Entity whose record key a successful authenticate_with call returns (e.g. users)."
    )
    owner_fields: dict[str, str] = Field(
        default_factory=dict,
        description="Entity -> field holding the key of the identity record that owns it (e.g. orders: user_id); "
        "with `identity`, requires_auth calls may name only the authenticated record and records it owns.",
    )
    confirm_writes: bool = Field(
        False, description="Each write must follow the user's explicit yes to the agent's request to confirm it."
    )
    no_unrequested_writes: bool = Field(
        False, description="No write call outside the reference solution's writes (same tool, same target)."
    )


class TaskSpec(_Model):
    """A task: what the user wants and knows, and how success is graded (hidden from the agent)."""

    id: str
    instruction: str = Field(
        description="The user's goal, in the user's words (the user simulator's script)."
    )
    opening: str = Field(description="The user's first message.")
    user_known: dict[str, str] = Field(default_factory=dict, description="Facts the user gives when asked.")
    solution: list[ToolCall] = Field(
        default_factory=list, description="Reference solution (tool calls in order)."
    )
    final_reply: str = Field("", description="What the reference agent says at the end.")
    assertions: list[Assertion] = Field(default_factory=list)
    answers: list[Answer] = Field(
        default_factory=list, description="Exact values the agent must tell the user, and nothing to guess with."
    )
    required_outputs: list[str] = Field(
        default_factory=list,
        description="Phrases the agent must say to the user (substring match; prefer `answers`, which cannot be "
        "passed by listing every candidate).",
    )
    rubric: list[str] = Field(default_factory=list, description="Natural-language criteria for an LLM judge.")
    max_steps: int | None = None
    tags: list[str] = Field(default_factory=list)
    meta: dict[str, Any] = Field(default_factory=dict)


class Hooks(_Model):
    """Optional Python hooks ('module:function' in the environment folder)."""

    on_reset: str | None = Field(
        None, description="fn(state, task, rng) after the world is built for an episode."
    )
    on_close: str | None = Field(None, description="fn(state) when the episode's state is discarded.")
    grade: str | None = Field(
        None, description="fn(state, task, messages) -> dict of reward components in [0, 1]."
    )


class WorldSpec(_Model):
    """A whole environment: entities, tools, policy, seed and settings."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_\-]*$")
    description: str = ""
    seed: int = 0
    locale: str = "en_US"
    entities: dict[str, EntitySpec] = Field(default_factory=dict)
    tools: list[ToolSpec]
    policy: str = ""
    system_prompt: str = "You are a helpful assistant. Use the tools to help the user."
    max_steps: int = 30
    failure_rate: float = Field(
        0.0, ge=0.0, le=1.0, description="Chance a tool call fails transiently (seeded)."
    )
    hooks: Hooks = Field(default_factory=Hooks)
    guard: dict[str, Any] = Field(default_factory=dict, description="Guard settings (see envgym.guard).")
    rules: PolicyRules | None = Field(None, description="Policy rules the rubric checks on the trajectory.")
    mechanisms: list[MechanismUse] = Field(
        default_factory=list, description="Business mechanisms (envgym.world.mechanisms) whose tools the world has."
    )
    meta: dict[str, Any] = Field(default_factory=dict)

    @field_validator("tools")
    @classmethod
    def _unique_tool_names(cls, tools: list[ToolSpec]) -> list[ToolSpec]:
        seen: set[str] = set()
        for tool in tools:
            if tool.name in seen:
                raise ValueError(f"duplicate tool name {tool.name!r}")
            seen.add(tool.name)
        return tools

    @model_validator(mode="after")
    def _effects_name_entities(self) -> WorldSpec:
        for i, tool in enumerate(self.tools):
            if tool.effect and tool.effect.entity not in self.entities:
                raise ValueError(
                    f"tools[{i}] ({tool.name}): effect entity {tool.effect.entity!r} is not one of {sorted(self.entities)}"
                )
        uses = {u.id for u in self.mechanisms}
        if len(uses) != len(self.mechanisms):
            raise ValueError("mechanisms: two uses share an id")
        for i, tool in enumerate(self.tools):
            if tool.mechanism and tool.mechanism.use not in uses:
                raise ValueError(f"tools[{i}] ({tool.name}): mechanism use {tool.mechanism.use!r} is not one of "
                                 f"{sorted(uses)}")
        if self.rules is not None:
            known = {t.name for t in self.tools}
            for where in ("authenticate_with", "requires_auth"):
                for name in getattr(self.rules, where) or []:
                    if name not in known:
                        raise ValueError(f"rules.{where}: {name!r} is not a tool of this world")
            for named in [self.rules.identity, *self.rules.owner_fields]:
                if named is not None and named not in self.entities:
                    raise ValueError(f"rules: {named!r} is not an entity of this world")
            for owned, owner in self.rules.owner_fields.items():
                if owner not in self.entities[owned].fields:
                    raise ValueError(f"rules.owner_fields.{owned}: {owner!r} is not a field of {owned}")
        for name, entity in self.entities.items():
            for fname, f in entity.fields.items():
                if f.ref and f.ref not in self.entities:
                    raise ValueError(f"entities.{name}.fields.{fname}: ref {f.ref!r} is not an entity")
        return self

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)
