"""The repository's own documents agree with what they describe: README's benchmark table is what the suite renders
from the committed results, and every script under benchmarks/ and experiments/ has its line in that folder's README."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.report import load_results, readme_table, render_table
from benchmarks.suite import SUITE, Record, json_objects

ROOT = Path(__file__).resolve().parent.parent


def test_readme_benchmark_table_is_the_one_rendered_from_the_committed_results() -> None:
    readme = (ROOT / "README.md").read_text()
    assert readme_table(readme) == render_table(load_results())


def test_every_suite_benchmark_has_a_committed_result() -> None:
    measured = load_results()["benchmarks"]
    assert sorted(measured) == sorted(b.name for b in SUITE)


@pytest.mark.parametrize("folder", ["benchmarks", "experiments"])
def test_every_script_is_listed_in_its_folders_readme(folder: str) -> None:
    listed = set(re.findall(r"`([\w.]+\.py)`", (ROOT / folder / "README.md").read_text()))
    scripts = {p.name for p in (ROOT / folder).glob("*.py") if p.name != "__init__.py"}
    assert scripts - listed == set()


def test_readme_stays_short_and_keeps_its_two_setup_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    setup = readme.split("## Set up", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"```bash\n(.*?)\n```", setup, re.S) == [
        "bash scripts/install.sh && envgym run retail --policy local --episodes 2 --max-steps 4 --max-tokens 128",
        "bash scripts/test.sh",
    ]


def test_json_objects_reads_one_line_and_indented_objects_among_other_output() -> None:
    text = 'progress...\n{"a": 1}\n{\n "b": [1,\n  2]\n}\n{not json\n'
    assert json_objects(text) == [{"a": 1}, {"b": [1, 2]}]


def test_a_record_meets_its_goal_on_the_ratio_when_it_has_one() -> None:
    assert Record("x", "m", value=10.0, baseline=25.0, ratio=2.5, goal="<= 3.0").met is True
    assert Record("x", "m", value=10.0, baseline=35.0, ratio=3.5, goal="<= 3.0").met is False
    assert Record("x", "m", value=0.0, goal="== 0").met is True
    assert Record("x", "m", value=1.0).met is None


def test_history_pages_put_the_newest_run_first_and_keep_older_text(tmp_path: Path) -> None:
    from benchmarks.report import add_history

    def run(date: str, value: float) -> dict[str, object]:
        return {"date": date, "quick": True, "command": "python benchmarks/x.py", "load_before": [1.0],
                "machine": "m", "records": [{"metric": "m", "value": value, "unit": "s", "baseline": None,
                                             "ratio": None, "goal": None, "met": None}]}

    page = add_history("x", run("2026-12-01T10:00:00", 1.5), tmp_path)
    page.write_text(page.read_text() + "\n## Before the suite runner\n\nold prose\n")
    add_history("x", run("2026-12-03T10:00:00", 2.5), tmp_path)
    text = page.read_text()
    assert text.index("2026-12-03 10:00") < text.index("2026-12-01 10:00") < text.index("old prose")
    assert "| m | 2.5 s |" in text
