"""Resumable, content-addressed JSONL files, one per stage.

A stage processes units (one per parent item) in a fixed order. Each finished unit is appended as one line to
`<stage>.partial.jsonl` followed by an end marker; on resume, units with a marker are skipped and lines of a unit
torn by a kill are dropped, so nothing is duplicated. `finish()` writes `<stage>.jsonl` sorted by the records' content
ids and removes the partial file, so the final bytes do not depend on how often the run was interrupted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from synth.seeds import canonical_json, content_id

T = TypeVar("T")


def with_id(record: dict[str, Any]) -> dict[str, Any]:
    """The record with `id` set to the content id of everything else in it."""
    body = {k: v for k, v in record.items() if k != "id"}
    return {"id": content_id(body), **body}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Complete JSON lines of `path`; a torn last line (no newline or bad JSON) is ignored."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().split("\n"):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Write records as canonical JSON lines atomically (write a temp file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(canonical_json(r) + "\n" for r in records))
    os.replace(tmp, path)


def _call(make: Callable[[], T]) -> T:
    return make()


def in_order(makes: Sequence[Callable[[], T]], workers: int) -> Iterator[T]:
    """Each call's result, in order; computed lazily here or in a pool of forked workers."""
    if workers <= 1 or len(makes) < 2:
        yield from (make() for make in makes)
        return
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(workers) as pool:
        yield from pool.imap(_call, makes, chunksize=1)


class StageStore:
    """One stage's output under `folder`: done units survive a kill; the final file is sorted by id."""

    def __init__(self, folder: Path, stage: str):
        self.final = folder / f"{stage}.jsonl"
        self.partial = folder / f"{stage}.partial.jsonl"
        self.stage = stage

    @property
    def complete(self) -> bool:
        return self.final.exists() and not self.partial.exists()

    def load(self) -> list[dict[str, Any]]:
        """The finished stage's records, sorted by id."""
        if not self.complete:
            raise FileNotFoundError(f"{self.final}: stage {self.stage!r} has not finished")
        return read_jsonl(self.final)

    def run(self, units: list[tuple[str, Callable[[], list[dict[str, Any]]]]],
            advance: Callable[[], None] | None = None, workers: int = 1) -> list[dict[str, Any]]:
        """Run each `(unit_key, make_records)` not yet done; records carry `unit` and `id`. Returns all records,
        as read back from the final file. With `workers` > 1 units run in forked processes; results are still
        appended in unit order, so the files are the same."""
        if self.complete:
            if advance:
                for _ in units:
                    advance()
            return self.load()
        lines = read_jsonl(self.partial)
        # A unit counts as done only once its end marker is written, so a unit torn by a kill is redone.
        finished = {r["unit"] for r in lines if r.get("end")}
        done = [r for r in lines if r["unit"] in finished]
        write_jsonl(self.partial, done)
        todo = [(key, make) for key, make in units if key not in finished]
        results = in_order([make for _, make in todo], workers)
        with self.partial.open("a") as sink:
            for key, _ in units:
                if key not in finished:
                    made = [with_id({**r, "unit": key}) for r in next(results)]
                    marker = {"unit": key, "end": True}
                    sink.write("".join(canonical_json(r) + "\n" for r in [*made, marker]))
                    sink.flush()
                    done.extend([*made, marker])
                if advance:
                    advance()
        records = sorted((r for r in done if not r.get("end")), key=lambda r: (r["id"], r["unit"]))
        write_jsonl(self.final, records)
        self.partial.unlink()
        # Return what a resumed run would read (sorted keys), so later stages see the same dicts either way.
        return self.load()
