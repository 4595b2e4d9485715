"""`envgym view`: one self-contained page, checked in headless Chromium for what a person sees."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from envgym.cli import main
from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode, run_episodes
from envgym.play.policies import OraclePolicy
from envgym.protocol import format_tool_call
from envgym.registry import find_env_dir
from envgym.users import STOP
from envgym.view.page import write_page

RETAIL = load_environment(str(find_env_dir("retail")))
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,900"]


class WrongOrderPolicy:
    """Returns a delivered order the task did not ask for, without authenticating or asking, then leaves."""

    def __init__(self, order_id: str):
        self.order_id = order_id

    def act(self, obs: str, info: dict[str, Any]) -> str:
        if sum(m["role"] == "assistant" for m in info["messages"]) == 0:
            return format_tool_call("return_delivered_order", {"order_id": self.order_id})
        return f"Done. {STOP}"


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is needed: scripts/test.sh installs Debian's chromium with apt-get"
    return found


def browse(url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"  # a fresh one per launch
    return subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *extra, url],
                          capture_output=True, text=True, timeout=180, check=True)


class TextOf(HTMLParser):
    """The text inside the element with a given id, and the ids of the tables in it."""

    def __init__(self, element_id: str):
        super().__init__()
        self.element_id, self.depth, self.parts, self.tables, self.items = element_id, 0, [], [], 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.depth or dict(attrs).get("id") == self.element_id:
            self.depth += 1
            if tag == "table":
                self.tables.append(dict(attrs).get("id"))
            self.items += tag == "li"

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.parts.append(data)

    @classmethod
    def of(cls, dom: str, element_id: str) -> TextOf:
        parser = cls(element_id)
        parser.feed(dom)
        return parser


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two passing oracle episodes, one wrong write, and a synth-rollouts line (another producer's format)."""
    path = tmp_path_factory.mktemp("view") / "episodes.jsonl"
    env = ToolWorldEnv(data=RETAIL, guard=False)
    task = next(t for t in RETAIL.tasks if t.solution[-1].name == "return_delivered_order")
    run_episodes(env, OraclePolicy(RETAIL), 2, task_ids=[task.id], out=path)
    wrong = run_episode(env, WrongOrderPolicy("#W0001"), seed=7, options={"task_id": task.id})
    synth_line = {"env": "retail", "task_id": wrong.task_id, "k": 0, "seed": 7, "policy": "wrong",
                  "reward": wrong.reward, "components": wrong.reward_components, "messages": wrong.messages,
                  "tools": wrong.tools, "steps": wrong.steps, "tool_errors": wrong.tool_errors}
    with path.open("a") as handle:
        handle.write(wrong.to_json() + "\n" + json.dumps(synth_line) + "\n")
    return path


def test_the_page_needs_no_network(episodes: Path, tmp_path: Path) -> None:
    page = write_page([episodes], tmp_path / "report.html").read_text()
    assert "<script src" not in page and "<link" not in page and "http://" not in page and "https://" not in page


def test_an_episode_opened_by_its_url_shows_its_calls_and_diff(episodes: Path, tmp_path: Path) -> None:
    assert main(["view", str(episodes), "--out", str(tmp_path / "report.html")]) == 0
    url = (tmp_path / "report.html").resolve().as_uri()
    listing = TextOf.of(browse(url, tmp_path, "--dump-dom").stdout, "list")
    assert listing.items == 4
    for index in (2, 3):  # the wrong write, as a run trajectory and as a synth rollout
        dom = browse(f"{url}#ep={index}", tmp_path, "--dump-dom").stdout
        detail = TextOf.of(dom, "detail")
        text = " ".join(detail.parts)
        assert 'return_delivered_order({"order_id": "#W0001"})' in text
        assert "✗ broke rule_confirm" in text
        assert {"components", "diff"} <= set(detail.tables)
        diff = " ".join(TextOf.of(dom, "diff").parts)
        assert "#W0001" in diff and '"return requested"' in diff and '"delivered"' in diff
    opened = " ".join(TextOf.of(browse(f"{url}#ep=0", tmp_path, "--dump-dom").stdout, "detail").parts)
    assert "The final state equals the target." in opened and "#W0001" not in opened


def test_a_screenshot_of_an_open_episode(episodes: Path, tmp_path: Path) -> None:
    page = write_page([episodes], tmp_path / "report.html", title="envgym view: retail, oracle and a wrong write")
    shot = Path(os.environ.get("ENVGYM_ARTIFACTS", tmp_path)) / "viewer.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    browse(f"{page.resolve().as_uri()}#ep=2", tmp_path, f"--screenshot={shot}")
    header = shot.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(header[16:20], "big"), int.from_bytes(header[20:24], "big")) == (1400, 900)
    assert shot.stat().st_size > 20_000  # a blank page compresses to a few kilobytes


def test_eval_report_links_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "eval"
    assert main(["eval", "retail", "--policy", "random", "--limit", "2", "--out", str(out), "--report", "--json"]) == 0
    files = json.loads(capsys.readouterr().out)["files"]
    assert files["page"] == str(out / "report.html") and "[report.html](report.html)" in (out / "report.md").read_text()
    assert len((out / "episodes.jsonl").read_text().splitlines()) == 2
    assert '"task_id"' in (out / "report.html").read_text()


def test_a_file_without_episodes_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert main(["view", str(bad)]) == 2
    assert "bad.jsonl:1: not JSON" in capsys.readouterr().err


def test_synth_rollouts_with_transient_failures_replay_to_their_diff(tmp_path: Path) -> None:
    from envgym.registry import register_dir
    from envgym.view.page import explain_all
    from envgym.view.records import read_records
    from synth.pipeline import SynthConfig, run_pipeline
    from synth.rollouts import rollout

    suite = tmp_path / "suite"
    run_pipeline(SynthConfig(seed=3, domains=1, tasks_per_env=2), suite)
    rollout(suite, tmp_path / "rollouts.jsonl", policy="random", n=2, failure_rate=0.5)
    register_dir(suite)
    explained = explain_all(read_records(tmp_path / "rollouts.jsonl"))
    assert any("temporarily unavailable" in str(m.get("content")) for r, _ in explained for m in r.messages)
    assert [why.replay_note for _, why in explained] == [None] * len(explained)
    assert any(why.diff for _, why in explained)  # the random agent left the world off its target
