"""A world's table: one entity's records, copy-on-write, with a cached canonical JSON text of the shared records."""

from __future__ import annotations

import copy
import datetime
import decimal
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

Record = dict[str, Any]

# How states are hashed: sorted keys, no spaces, unicode as is, anything JSON cannot hold as its str().
CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
# Texts of shared records and of read-only tables are cached per family of forks; past these many entries a cache
# starts over.
RECORD_TEXTS_LIMIT = 100_000
TABLE_TEXTS_LIMIT = 64


# Values that no one can change in place, so a copied record may share them with its original.
_ATOMIC: frozenset[type] = frozenset({str, int, float, bool, type(None), bytes, datetime.date, datetime.datetime,
                                      datetime.time, decimal.Decimal})


def copy_record(value: Any) -> Any:
    """A deep copy of JSON-like data, several times faster than copy.deepcopy (other types fall back to it)."""
    kind = type(value)
    if kind is dict:
        return {k: v if type(v) in _ATOMIC else copy_record(v) for k, v in value.items()}
    if kind is list:
        return [v if type(v) in _ATOMIC else copy_record(v) for v in value]
    if kind in _ATOMIC:
        return value
    return copy.deepcopy(value)


class Table(dict[str, Record]):
    """One entity's records, copy-on-write: records shared with other states are copied on first access.

    A record whose key is not in `_owned` may be shared with the state this one was copied from (or with its
    copies) and must never be changed in place; every accessor that hands a record out copies it first, so a tool
    may mutate whatever it gets. `peek`, `peek_values` and `peek_items` hand out records without copying, for
    readers that never write (hashing, diffs, read-only tools).
    """

    __slots__ = ("_owned", "_text", "_texts", "_whole")

    def __init__(self, records: dict[str, Record] | None = None, owned: bool = True):
        super().__init__(records or {})
        self._owned: set[str] = set(self) if owned else set()
        # This table's canonical text while no record is owned: every way a record is handed out or the keys
        # change (`_own`, `__setitem__`, `__delitem__`, `clear`) drops it.
        self._text: str | None = None
        # Canonical texts, shared by every fork of this table: id(record) -> (record, key, "key:record") and
        # (keys, record ids) -> (records, table text). Shared records are never changed in place, so a text holds
        # as long as its entry keeps the records (and so their ids) alive.
        self._texts: dict[int, tuple[Record, str, str]] = {}
        self._whole: dict[tuple[tuple[str, ...], tuple[int, ...]], tuple[tuple[Record, ...], str]] = {}

    def _own(self, key: str, record: Record) -> Record:
        record = copy_record(record)
        dict.__setitem__(self, key, record)
        self._owned.add(key)
        self._text = None
        return record

    def _own_all(self) -> None:
        if len(self._owned) != len(self):
            for key, record in list(dict.items(self)):
                if key not in self._owned:
                    self._own(key, record)

    def __getitem__(self, key: str) -> Record:
        record = dict.__getitem__(self, key)
        return record if key in self._owned else self._own(key, record)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._owned:
            return dict.get(self, key, default)
        if key not in self:
            return default
        return self._own(key, dict.__getitem__(self, key))

    def __setitem__(self, key: str, record: Record) -> None:
        dict.__setitem__(self, key, record)
        self._owned.add(key)
        self._text = None

    def __delitem__(self, key: str) -> None:
        dict.__delitem__(self, key)
        self._owned.discard(key)
        self._text = None

    def pop(self, key: str, *default: Any) -> Any:
        if key not in self:
            return dict.pop(self, key, *default)
        record = self[key]
        self.__delitem__(key)
        return record

    def popitem(self) -> tuple[str, Record]:
        key = next(reversed(self))
        return key, self.pop(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        if key not in self:
            self[key] = default
        return self[key]

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, record in dict(*args, **kwargs).items():
            self[key] = record

    def clear(self) -> None:
        dict.clear(self)
        self._owned.clear()
        self._text = None

    def values(self) -> Any:
        self._own_all()
        return dict.values(self)

    def items(self) -> Any:
        self._own_all()
        return dict.items(self)

    # Overriding __iter__ keeps dict(table) and {**table} off CPython's fast path, which would read shared
    # records without copying them; they go through keys() and __getitem__ instead.
    def __iter__(self) -> Iterator[str]:
        return dict.__iter__(self)

    def copy(self) -> Table:
        return Table({key: copy_record(record) for key, record in dict.items(self)})

    def __copy__(self) -> Table:
        return self.copy()

    def __deepcopy__(self, memo: dict[int, Any]) -> Table:
        return self.copy()

    def __reduce__(self) -> Any:
        return (Table, (dict(dict.items(self)),))  # pickling copies the records anyway

    def __or__(self, other: Any) -> Table:  # type: ignore[override]
        merged = self.copy()
        merged.update(other)
        return merged

    def __ior__(self, other: Any) -> Table:  # type: ignore[override]
        self.update(other)
        return self

    def peek(self, key: str) -> Record | None:
        """The record without a copy: read it, never change it."""
        return dict.get(self, key)

    def peek_values(self) -> Iterable[Record]:
        """The records without copies: read them, never change them."""
        return dict.values(self)

    def peek_items(self) -> Iterable[tuple[str, Record]]:
        """(key, record) pairs without copies: read them, never change them."""
        return dict.items(self)

    def fork(self) -> Table:
        """A copy that shares every record with this table; from now on both copy a record before handing it out."""
        self._owned.clear()
        child = Table.__new__(Table)
        dict.update(child, dict.items(self))
        child._owned = set()
        child._text = self._text  # None unless computed since the last record was handed out: still true
        child._texts, child._whole = self._texts, self._whole
        return child

    def canonical_json(self) -> str:
        """`CANONICAL.encode(dict(table))`, without encoding again what other forks of the table already encoded."""
        texts, whole_texts, owned = self._texts, self._whole, self._owned
        if not owned and self._text is not None:
            return self._text
        for cache, limit in ((texts, RECORD_TEXTS_LIMIT), (whole_texts, TABLE_TEXTS_LIMIT)):
            if len(cache) > limit:
                cache.clear()
        keys = tuple(dict.keys(self))
        records = tuple(dict.values(self))
        # A table that shares all its records is read only: its text is cached under its keys and record ids.
        whole = None if owned else (keys, tuple(map(id, records)))
        if whole is not None and whole in whole_texts:
            self._text = whole_texts[whole][1]
            return self._text
        if not all(type(k) is str for k in keys):
            return CANONICAL.encode(dict(zip(keys, records, strict=True)))
        parts = []
        for key, record in sorted(zip(keys, records, strict=True), key=_first):
            if key in owned:
                parts.append(f"{CANONICAL.encode(key)}:{CANONICAL.encode(record)}")
                continue
            cached = texts.get(id(record))
            if cached is None or cached[0] is not record or cached[1] != key:
                cached = texts[id(record)] = (record, key, f"{CANONICAL.encode(key)}:{CANONICAL.encode(record)}")
            parts.append(cached[2])
        text = "{" + ",".join(parts) + "}"
        if whole is not None:
            whole_texts[whole] = (records, text)
            self._text = text
        return text


def _first(pair: tuple[str, Record]) -> str:
    return pair[0]


def raw_items(table: dict[str, Record]) -> Iterable[tuple[str, Record]]:
    """A table's (key, record) pairs as stored, without copies: read them, never change them."""
    return dict.items(table)


def fork_table(table: dict[str, Record]) -> Table:
    """A copy of any table that shares what it safely can (see `Table.fork`)."""
    if isinstance(table, Table):
        return table.fork()
    # A plain dict put into `tables` by hand: its owner may still change it, so the copy cannot share it.
    return Table({k: copy_record(r) for k, r in table.items()})


def next_key(table: Mapping[str, Any], prefix: str = "", key_format: str = "{prefix}{index:04d}") -> str:
    """The key of a new record: the first free `key_format` from index len(table) up (a world's key format)."""
    index = len(table)
    while (key := key_format.format(prefix=prefix, index=index)) in table:
        index += 1
    return key
