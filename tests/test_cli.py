"""The envgym command: list, show, run --json, generate; one JSON object per --json; user errors are one line."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.cli import build_parser, main
from envgym.registry import bundled_dir


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1, f"expected one JSON line, got {out[:300]!r}"
    obj = json.loads(out)
    assert isinstance(obj, dict)
    return obj


REPO = Path(__file__).resolve().parent.parent


def envgym(*argv: str) -> subprocess.CompletedProcess[str]:
    """`python -m envgym.cli` of this checkout, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "envgym.cli", *argv], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env=env)


def test_list_shows_the_bundled_suite(capsys: pytest.CaptureFixture[str]) -> None:
    ids = {e["id"] for e in run_json(capsys, "list", "--json")["environments"]}
    assert {"envgym/retail-v0", "envgym/travel-v0", "envgym/calculator-v0"} <= ids


def test_show_describes_tools_and_policy(capsys: pytest.CaptureFixture[str]) -> None:
    shown = run_json(capsys, "show", "retail", "--json")
    assert len(shown["tools"]) >= 8 and "Authenticate" in shown["policy"]
    assert shown["entities"]["orders"] == 80


def test_run_oracle_writes_trajectories(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "traj.jsonl"
    summary = run_json(capsys, "run", "travel", "--policy", "oracle", "--episodes", "3", "--out", str(out), "--json")
    assert summary["episodes"] == 3 and summary["mean_reward"] == 1.0 and summary["success_rate"] == 1.0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 3 and all(t["reward"] == 1.0 and t["messages"] for t in lines)


def test_run_random_policy_scores_below_oracle(capsys: pytest.CaptureFixture[str]) -> None:
    summary = run_json(capsys, "run", "retail", "--policy", "random", "--episodes", "4", "--json")
    assert summary["episodes"] == 4 and summary["mean_reward"] < 1.0


def test_console_script_runs() -> None:
    done = subprocess.run([sys.executable, "-m", "envgym.cli", "run", "calculator", "--json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(done.stdout)["success_rate"] == 1.0


def test_unknown_environment_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "nope"]) == 2
    assert "unknown environment 'nope'" in capsys.readouterr().err


def _leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(path): parser}
    leaves: dict[str, argparse.ArgumentParser] = {}
    for name, child in subs[0].choices.items():
        leaves.update(_leaf_parsers(child, (*path, name)))
    return leaves


def test_every_command_takes_json() -> None:
    leaves = _leaf_parsers(build_parser())
    assert {"list", "generate", "k8s apply", "k8s render", "serve", "synth run"} <= set(leaves)
    lacking = [name for name, p in leaves.items() if "--json" not in p._option_string_actions]
    assert lacking == []


@pytest.mark.parametrize(
    "argv",
    [
        ["schema", "--json"],
        ["show", "calculator", "--json"],
        ["eval", "calculator", "--limit", "2", "--json"],
        ["k8s", "render", "dev", "--engine", "python", "--json"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_json_flag_prints_one_object(argv: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # eval writes its report under runs/
    assert run_json(capsys, *argv)


def test_k8s_render_json_holds_the_documents(capsys: pytest.CaptureFixture[str]) -> None:
    rendered = run_json(capsys, "k8s", "render", "dev", "--engine", "python", "--json")
    assert rendered["count"] == len(rendered["documents"]) and rendered["documents"][0]["kind"] == "Namespace"


@pytest.mark.usefixtures("registry_restored")
def test_generate_json_names_the_rewritten_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "suite" / "calccopy"
    shutil.copytree(bundled_dir() / "calculator", folder, ignore=shutil.ignore_patterns("__pycache__"))
    before = (folder / "tasks.jsonl").read_bytes()
    (folder / "tasks.jsonl").write_text("")
    out = run_json(capsys, "generate", "calccopy", "--env-dir", str(tmp_path / "suite"), "--json")
    assert out == {"env": "envgym/calccopy-v0", "tasks": 200, "path": str(folder / "tasks.jsonl")}
    assert (folder / "tasks.jsonl").read_bytes() == before


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["show", "nope"], "unknown environment 'nope'"),
        (["run", "calculator", "--episodes", "many"], "--episodes: expected a whole number, got 'many'"),
        (["run", "calculator", "--episodes", "0"], "expected a number >= 1"),
        (["list", "--env-dir", "/no/such/folder"], "/no/such/folder: no such folder of environments"),
        (["eval", "calculator", "--task", "no-such-task"], "no task 'no-such-task'"),
        (["k8s", "render", "staging"], "overlay 'staging'"),
        (["run", "broken", "--env-dir", "{suite}"], "broken/world.yaml: invalid WorldSpec"),
        (["serve", "nope", "--port", "0"], "`nope` doesn't exist"),
    ],
    ids=["unknown env", "not a number", "zero episodes", "missing folder", "unknown task", "unknown overlay",
         "bad world file", "serve unknown env"],
)
def test_user_errors_are_one_line_and_exit_2(argv: list[str], named: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    (suite / "broken").mkdir(parents=True)
    (suite / "broken" / "world.yaml").write_text("name: broken\ntools:\n  - name: t\n")
    done = envgym(*(a.format(suite=suite) for a in argv))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert named in done.stderr
    assert done.stdout == ""
