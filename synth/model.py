"""The typed records that pass between synthesis stages (pydantic: they are written to and read from JSONL).

A domain is a data model: entities made of typed fields from the ontology below, references between them (one to
many; many to many through a link entity), state machines on status fields, and limits. Tools, tasks and verdicts
are records of their own, each naming the operators that made it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from synth.lexicon import plural, words

FieldKind = Literal["id", "ref", "name", "email", "phone", "money", "currency", "date", "time", "duration",
                    "quantity", "enum", "state", "address", "postcode", "text", "list", "code"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FieldModel(_Record):
    """One field: its ontology kind, and what its values range over."""

    name: str
    kind: FieldKind
    choices: list[str] = Field(default_factory=list, description="enum, state and list kinds")
    lo: float = 0
    hi: float = 0
    unit: str = Field("", description="currency of money, unit of duration and quantity")
    ref: str | None = Field(None, description="ref kind: the entity whose key this holds")


class Transition(_Record):
    """A workflow step on an entity's status: `verb` moves a record from any of `source` to `target`."""

    verb: str
    source: list[str]
    target: str


class EntityModel(_Record):
    """An entity type: a table of records with typed fields; `owner` is the field naming the account holder."""

    name: str
    prefix: str
    count: int
    fields: list[FieldModel]
    owner: str | None = None
    workflow: list[Transition] = Field(default_factory=list)
    link: bool = Field(False, description="a link entity of a many-to-many relation")
    catalog: bool = Field(False, description="public records anyone may browse (no owner)")

    @property
    def plural(self) -> str:
        return plural(self.name)

    @property
    def key(self) -> str:
        return f"{self.name}_id"

    @property
    def label(self) -> str:
        return words(self.name)

    def plurals_of(self, parent: EntityModel) -> str:
        """`line_items_of_order`: this entity's plural under a parent (a one-to-many relation's tool name)."""
        return f"{self.plural}_of_{parent.name}"

    def field(self, name: str) -> FieldModel:
        return next(f for f in self.fields if f.name == name)

    def of_kind(self, *kinds: str) -> list[FieldModel]:
        return [f for f in self.fields if f.kind in kinds]


class Limit(_Record):
    """A constraint on writes: `entity.field` may not exceed `value` (checked as a precondition)."""

    entity: str
    field: str
    value: float


class DomainModel(_Record):
    """One domain: where it came from (taxonomy category, parent, operators) and its data model."""

    name: str
    category: str
    description: str
    parent: str | None = None
    root: str = Field(description="the taxonomy seed domain this one grew from")
    operators: list[str] = Field(default_factory=list, description="structural operators, root first")
    account: str = Field(description="the entity of the people the service acts for")
    auth: list[str] = Field(description="account fields the user proves who they are with")
    entities: list[EntityModel]
    limits: list[Limit] = Field(default_factory=list)
    seed: int
    order: int

    def entity(self, name: str) -> EntityModel:
        return next(e for e in self.entities if e.name == name)

    def root_description(self, audience: str) -> str:
        """The seed domain's description specialised for an audience (one clause, however deep the lineage)."""
        base = self.description.split(", for ")[0].rstrip(".")
        return f"{base}, for {words(audience)} customers."

    def owned(self) -> list[EntityModel]:
        """Entities whose records belong to an account (directly)."""
        return [e for e in self.entities if e.owner is not None]


class ToolName(_Record):
    """What a model proposed to name a tool, and why it was rejected ("" when the tool carries it)."""

    procedural: str
    proposed: str
    reply: str = Field(description="the model's reply the name was read from")
    rejected_by: str = ""


class ToolRecord(_Record):
    """A synthesized tool: its spec (world format), the operator and mutations that made it, and its checks."""

    domain: str
    spec: dict[str, Any]
    operator: str
    mutations: list[str] = Field(default_factory=list)
    entity: str
    signature: str = Field(description="structure with names masked (for diversity counts)")
    checks: dict[str, bool] = Field(default_factory=dict)
    valid: bool = False
    order: int = 0
    naming: ToolName | None = Field(None, description="the model's proposed name (runs with a model only)")


class TaskRecord(_Record):
    """A sampled task with the outcome of verification against the negative controls."""

    env: str
    task: dict[str, Any]
    shape: str
    scores: dict[str, float]
    keep: bool
    rejected_by: list[str] = Field(default_factory=list)
    order: int = 0
