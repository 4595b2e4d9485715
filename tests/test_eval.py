"""Evaluation: the pass@k / pass^k estimators pinned to hand-computed values, failure labels, reports and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.play.eval import EvalReport, evaluate, failure_label, mean_over_tasks, pass_at_k, pass_hat_k
from envgym.play.policies import OraclePolicy, RefusePolicy
from envgym.registry import find_env_dir


@pytest.mark.parametrize(
    ("n", "c", "k", "at_k", "hat_k"),
    [
        (4, 3, 2, 1.0, 0.5),  # pass^2 = C(3,2)/C(4,2) = 3/6; pass@2 = 1 - C(1,2)/C(4,2) = 1
        (5, 2, 2, 0.7, 0.1),  # pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10; pass^2 = C(2,2)/C(5,2) = 1/10
        (4, 3, 1, 0.75, 0.75),
        (4, 0, 3, 0.0, 0.0),
        (4, 4, 4, 1.0, 1.0),
        (6, 3, 3, 0.95, 0.05),  # 1 - C(3,3)/C(6,3) = 1 - 1/20; C(3,3)/C(6,3) = 1/20
    ],
)
def test_estimators_match_hand_computed_values(n: int, c: int, k: int, at_k: float, hat_k: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(at_k)
    assert pass_hat_k(n, c, k) == pytest.approx(hat_k)


def test_estimators_are_averaged_over_tasks() -> None:
    runs = {"a": [True, True, True, False], "b": [False] * 4}
    assert mean_over_tasks(runs, 2, pass_hat_k) == pytest.approx(0.25)
    assert mean_over_tasks(runs, 2, pass_at_k) == pytest.approx(0.5)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 5, 1), (4, 2, 0), (3, 1, 4), (2, -1, 1)])
def test_estimators_reject_impossible_counts(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="n="):
        pass_at_k(n, c, k)


def _call(name: str, args: str = "{}") -> dict:
    return {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": name, "arguments": args}}]}


@pytest.mark.parametrize(
    ("messages", "errors", "truncated", "label"),
    [
        ([_call("x")], ["guard_denied", "unknown_tool"], False, "guard_blocked"),
        ([_call("made_up")], ["unknown_tool"], False, "hallucinated_tool"),
        ([_call("x")], ["invalid_arguments"], True, "invalid_arguments"),
        ([_call("x", '{"a": 1}')] * 3, [], True, "loop"),
        ([_call("x"), _call("y")], [], True, "max_steps"),
        ([{"role": "assistant", "content": "I cannot help."}], [], False, "gave_up"),
        ([_call("x"), _call("y")], [], False, "wrong_tool"),
    ],
)
def test_failure_labels(messages: list, errors: list, truncated: bool, label: str) -> None:
    assert failure_label(messages, errors, truncated) == label


def _retail() -> ToolWorldEnv:
    return ToolWorldEnv(find_env_dir("retail"))


def test_oracle_and_refusal_bound_the_metrics() -> None:
    env = _retail()
    tasks = [t.id for t in env.data.tasks][:4]
    good = evaluate(env, lambda e: OraclePolicy(e.data), "oracle", runs=2, tasks=tasks).summary()
    bad = evaluate(env, lambda e: RefusePolicy(), "refuse", runs=2, tasks=tasks).summary()
    assert good["pass@1"] == 1.0 and good["pass^k"] == {"1": 1.0, "2": 1.0}
    assert good["benign_utility"] == {"num": 8, "den": 8, "rate": 1.0}
    assert bad["pass@k"] == {"1": 0.0, "2": 0.0} and bad["failures"] == {"gave_up": 8}
    assert good["median_steps"] >= 3 and good["median_wall_s"] > 0


def test_report_files_hold_the_summary(tmp_path: Path) -> None:
    env = _retail()
    report = evaluate(env, lambda e: OraclePolicy(e.data), "oracle", runs=2, tasks=[env.data.tasks[0].id])
    paths = report.write(tmp_path)
    results = json.loads(paths["results"].read_text())
    assert results["summary"] == json.loads(json.dumps(report.summary()))
    assert len(results["episodes"]) == 2
    assert paths["chart"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = paths["report"].read_text()
    assert "| 2 | 1.000 | 1.000 |" in text and "benign utility | 2/2 (100.0%)" in text


def test_summary_counts_attacks_as_fractions() -> None:
    report = EvalReport("w", "p", 1, True, "deny")
    assert report.summary()["targeted_asr"] == {"num": 0, "den": 0, "rate": None}


def test_cli_eval_prints_one_json_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "retail", "--policy", "refuse", "--runs", "2", "--limit", "3", "--json",
                 "--out", str(tmp_path)])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["episodes"] == 6 and summary["pass@1"] == 0.0
    files = {Path(p).name: Path(p) for p in summary["files"].values()}
    assert set(files) == {"report.md", "results.json", "chart.png", "episodes.jsonl"}
    assert len(files["episodes.jsonl"].read_text().splitlines()) == 6  # one line per episode, for the viewer


@pytest.mark.model
@pytest.mark.slow
def test_cli_eval_with_the_local_model_writes_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "retail", "--policy", "local", "--runs", "3", "--limit", "1", "--max-steps", "1",
                 "--max-tokens", "32", "--json", "--out", str(tmp_path)])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["episodes"] == 3 and set(summary["pass^k"]) == {"1", "2", "3"}
    assert summary["median_tokens"] > 0
    assert (tmp_path / "chart.png").exists() and (tmp_path / "report.md").exists()
