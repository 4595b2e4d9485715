"""Trajectory files to one HTML page: read, explain each episode against its environment, render."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from envgym.loader import EnvironmentData, load_environment
from envgym.registry import find_env_dir
from envgym.view.explain import Explanation, explain
from envgym.view.html import render_page
from envgym.view.records import EpisodeRecord, read_records


def explain_all(records: Sequence[EpisodeRecord]) -> list[tuple[EpisodeRecord, Explanation]]:
    """Each record with its explanation; environments are loaded once each, and one not registered here (a
    synthesized world not passed with --env-dir) gives explanations without a replay."""
    loaded: dict[str, EnvironmentData | None] = {}
    out = []
    for record in records:
        if record.env not in loaded:
            try:
                loaded[record.env] = load_environment(str(find_env_dir(record.env)))
            except KeyError:  # UnknownEnvironmentError, or a registered remote env without a folder
                loaded[record.env] = None
        out.append((record, explain(record, loaded[record.env])))
    return out


def write_page(sources: Sequence[str | Path], out: str | Path, *, title: str | None = None) -> Path:
    """Write the page of every episode in `sources` (JSONL files) to `out`; returns its path."""
    records = [r for source in sources for r in read_records(source)]
    page = render_page(explain_all(records), title=title or f"envgym episodes: {', '.join(map(str, sources))}")
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
