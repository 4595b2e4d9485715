"""The seed tree and the resumable stage store."""

from __future__ import annotations

from pathlib import Path

from synth.seeds import content_id, item_seed
from synth.store import StageStore, read_jsonl


def test_item_seed_depends_on_every_part_of_its_path() -> None:
    base = item_seed(1, "tasks", "env", 0)
    assert base == item_seed(1, "tasks", "env", 0)
    assert len({base, item_seed(2, "tasks", "env", 0), item_seed(1, "tools", "env", 0),
                item_seed(1, "tasks", "other", 0), item_seed(1, "tasks", "env", 1)}) == 5


def test_content_id_ignores_key_order() -> None:
    assert content_id({"a": 1, "b": [1, 2]}) == content_id({"b": [1, 2], "a": 1})
    assert content_id({"a": 1}) != content_id({"a": 2})


def _units(calls: list[str]) -> list[tuple[str, object]]:
    def make(key: str) -> object:
        def run() -> list[dict[str, object]]:
            calls.append(key)
            return [{"key": key, "n": i} for i in range(2)]
        return run
    return [(k, make(k)) for k in ("u1", "u2", "u3")]


def test_resume_skips_finished_units_and_redoes_a_torn_one(tmp_path: Path) -> None:
    clean: list[str] = []
    expected = StageStore(tmp_path / "clean", "s").run(_units(clean))  # type: ignore[arg-type]
    # Simulate a kill: u1 finished, u2 written without its end marker and with a torn last line.
    store = StageStore(tmp_path / "killed", "s")
    store.partial.parent.mkdir(parents=True)
    finished = (tmp_path / "clean" / "s.jsonl").read_text().splitlines()
    u1 = [line for line in finished if '"u1"' in line]
    u2 = [line for line in finished if '"u2"' in line]
    store.partial.write_text("\n".join([*u1, '{"end":true,"unit":"u1"}', u2[0], u2[1][:10]]))
    calls: list[str] = []
    records = store.run(_units(calls))  # type: ignore[arg-type]
    assert calls == ["u2", "u3"]
    assert records == expected
    assert store.final.read_bytes() == (tmp_path / "clean" / "s.jsonl").read_bytes()
    assert not store.partial.exists()
    assert len({r["id"] for r in read_jsonl(store.final)}) == 6
