"""`envgym eval bfcl-multi-turn|bfcl`: accuracy per BFCL category with 95% Wilson intervals; `envgym list` shows
both environments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.cli import main
from envgym.optimize.report import wilson


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_list_shows_both_bfcl_environments(capsys: pytest.CaptureFixture[str]) -> None:
    rows = {e["id"]: e for e in run_json(capsys, "list", "--json")["environments"]}
    assert "BFCL multi-turn" in rows["envgym/bfcl-multi-turn-v0"]["description"]
    assert "BFCL single-turn" in rows["envgym/bfcl-v0"]["description"]


@pytest.mark.parametrize(("policy", "valid"), [("oracle", 2), ("refuse", 0)])
def test_multi_turn_eval_reports_each_category(capsys: pytest.CaptureFixture[str], tmp_path: Path, policy: str,
                                               valid: int) -> None:
    out = run_json(capsys, "eval", "bfcl-multi-turn", "--policy", policy, "--category", "base", "--category",
                   "miss_param", "--limit", "2", "--json", "--out", str(tmp_path))
    rows = out["categories"]
    assert [r["category"] for r in rows] == ["multi_turn_base", "multi_turn_miss_param"]
    for row in rows:
        assert (row["n"], row["correct"]) == (2, valid)
        assert row["ci95"] == pytest.approx(list(wilson(valid, 2)))
    assert out["overall"] == valid / 2
    assert (tmp_path / "report.md").read_text().count("| multi_turn_") == 2


def test_single_turn_eval_takes_bfcl_category_names(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = run_json(capsys, "eval", "bfcl", "--policy", "oracle", "--category", "simple", "--category",
                   "irrelevance", "--limit", "3", "--json", "--out", str(tmp_path))
    assert [(r["category"], r["correct"]) for r in out["categories"]] == [("simple_python", 3), ("irrelevance", 3)]


def test_an_unknown_category_is_a_one_line_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["eval", "bfcl", "--category", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown BFCL category 'nope'" in capsys.readouterr().err
