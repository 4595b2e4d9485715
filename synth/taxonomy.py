"""The taxonomy file (taxonomy.yaml): categories of tool domains and their seed domain blueprints."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

TAXONOMY_FILE = Path(__file__).with_name("taxonomy.yaml")
_NAME = r"^[a-z][a-z0-9_]*$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ActorSpec(_Model):
    """The people who use the domain's service (users, patients, traders)."""

    noun: str = Field(pattern=_NAME)
    plural: str | None = None

    @property
    def entity(self) -> str:
        return self.plural or f"{self.noun}s"


class AssetSpec(_Model):
    """The things users act on: kinds, one settable numeric measure, and states (the last one blocks changes)."""

    noun: str = Field(pattern=_NAME)
    plural: str | None = None
    kinds: list[str] = Field(min_length=2)
    measure: str = Field(pattern=_NAME)
    unit: str
    min: float
    max: float
    states: list[str] = Field(min_length=3)

    @property
    def entity(self) -> str:
        return self.plural or f"{self.noun}s"


class RecordSpec(_Model):
    """Records linking a user to an asset, with an integer quantity, verbs and open (cancellable) states."""

    noun: str = Field(pattern=_NAME)
    plural: str | None = None
    qty: str = Field(pattern=_NAME)
    qty_min: int
    qty_max: int
    create_verb: str = Field(pattern=_NAME)
    cancel_verb: str = Field(pattern=_NAME)
    open: list[str] = Field(min_length=2)
    reasons: list[str] = Field(min_length=2)

    @property
    def entity(self) -> str:
        return self.plural or f"{self.noun}s"

    @model_validator(mode="after")
    def _range(self) -> RecordSpec:
        if self.qty_min >= self.qty_max:
            raise ValueError(f"record {self.noun}: qty_min must be below qty_max")
        return self


class DomainBlueprint(_Model):
    """One specific application domain: what it is about, its entities and the goals its users have."""

    name: str = Field(pattern=_NAME)
    description: str
    goals: list[str] = Field(min_length=1)
    actor: ActorSpec
    asset: AssetSpec
    record: RecordSpec


class Category(_Model):
    description: str
    domains: list[DomainBlueprint] = Field(min_length=1)


class Taxonomy(_Model):
    categories: dict[str, Category] = Field(min_length=1)


def load_taxonomy(path: Path = TAXONOMY_FILE) -> Taxonomy:
    """Load and validate a taxonomy file; errors name the file and the field."""
    try:
        return Taxonomy.model_validate(yaml.safe_load(path.read_text()))
    except ValidationError as exc:
        where = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()[:5])
        raise ValueError(f"{path}: invalid taxonomy: {where}") from exc


@cache
def builtin_taxonomy() -> Taxonomy:
    return load_taxonomy()
