"""Issue 45, coverage: exploring a live server reaches tools whose calls need a precondition it did not meet before.

mcp-server-git (PyPI) over a real repository (`synth.mcp_templates.git_repository`): its staged changes live in the
git index, whose bytes differ per copy, so a `git_status` probe reads them back; its text answers are read through
their `Key: value` lines. The knowledge-graph memory server: deletions take an entity's own name and observations, or
a relation as it was returned, from one record a result held.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from envgym.cli import main
from envgym.world.spec import ToolCall
from envgym.world.state import WorldState
from synth.mcp_explore import Explorer
from synth.mcp_harvest import harvest
from synth.mcp_live import EpisodeMCPTools, relative_to_state
from synth.mcp_templates import GIT_ENV, GIT_PROBE, GIT_VOLATILE, git_repository
from synth.program import AnswerStep, CallStep, Expr, Program, Reply, run
from synth.stages.mcp_live import _classify
from tests.synth.mcp_commands import MEMORY

GIT = "mcp-server-git --repository {state}"
LOG = ("Commit history:\nCommit: 1a9c3a8ae3884055b422c3a4b5964a1912814415\nAuthor: Ada Lovelace\n"
       "Date: 2026-01-05 09:30:00+00:00\nMessage: Plan the first release\n\nCommit: 02eca13\nMessage: Start\n")


def test_a_text_result_is_read_through_its_key_value_lines() -> None:
    program = Program(steps=[
        CallStep(tool="git_log", args={"repo_path": Expr(src="lit", value=".")}, save="r0"),
        AnswerStep(values=[Expr(src="var", key="r0", path=["Commit"])], template="It is {0}.")])
    steps = run(program)
    next(steps)
    reply = steps.send(LOG)
    assert isinstance(reply, Reply)
    assert reply.values == ("1a9c3a8ae3884055b422c3a4b5964a1912814415",)  # the first commit line, not the second


def test_the_git_template_has_the_same_commits_everywhere(tmp_path: Path) -> None:
    def head(folder: Path) -> str:
        git_repository(folder)
        return subprocess.run(["git", "rev-parse", "HEAD", "release"], cwd=folder, capture_output=True, text=True,
                              check=True).stdout

    assert head(tmp_path / "a") == head(tmp_path / "b")
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tmp_path / "a", capture_output=True, text=True,
                            check=True).stdout.splitlines()
    assert sorted(status) == [" M notes.txt", "?? todo.md", "M  docs/plan.md"]  # staged, unstaged, untracked


@pytest.fixture(scope="module")
def git_episodes(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Any], Path]:
    repo = git_repository(tmp_path_factory.mktemp("repo") / "state")
    return harvest([GIT], env=GIT_ENV, state_template=repo), repo


@pytest.mark.mcp
def test_a_status_probe_grades_what_only_the_git_index_holds(git_episodes: tuple[list[Any], Path]) -> None:
    specs, repo = git_episodes
    reset = next(s for s in specs if s.name == "git_reset")  # unstages docs/plan.md: only the index changes
    blind = EpisodeMCPTools(specs, repo, GIT_ENV, exclude=GIT_VOLATILE)
    state = WorldState({})
    blind.call(state, reset, {"repo_path": "."})
    assert blind.state_digest(state) == blind.initial_digest  # the folder, less its volatile files, cannot tell
    blind.stop(state)
    probed = EpisodeMCPTools(specs, repo, GIT_ENV, exclude=GIT_VOLATILE, probes=[ToolCall.model_validate(GIT_PROBE)])
    digests = []
    for _ in range(2):  # two fresh servers over two copies: the same call, the same graded state
        state = WorldState({})
        probed.call(state, reset, {"repo_path": "."})
        digests.append(probed.state_digest(state))
        probed.stop(state)
    assert digests[0] == digests[1] != probed.initial_digest


@pytest.mark.mcp
def test_exploring_git_reaches_its_tools_and_tells_its_writes(git_episodes: tuple[list[Any], Path]) -> None:
    specs, repo = git_episodes
    episodes = EpisodeMCPTools(specs, repo, GIT_ENV, exclude=GIT_VOLATILE, probes=[ToolCall.model_validate(GIT_PROBE)])
    explorer = Explorer(episodes, seed=1)
    explorer.survey()
    usable, writes, left_out = _classify(explorer, specs)
    assert len(usable) >= 10, left_out
    assert {"git_add", "git_commit", "git_create_branch", "git_checkout"} <= writes, left_out
    assert not writes & {"git_status", "git_log", "git_diff_unstaged", "git_show"}


@pytest.mark.mcp
def test_memory_deletions_take_one_records_own_fields(tmp_path: Path) -> None:
    env = {"MEMORY_FILE_PATH": "{state}/memory.jsonl"}
    specs = harvest([MEMORY], env=env)
    state = tmp_path / "state"
    state.mkdir()
    episodes = EpisodeMCPTools(specs, state, env)
    explorer = Explorer(episodes, seed=1)
    explorer.seed_state(tmp_path / "seeded")
    explorer.episodes = EpisodeMCPTools(specs, tmp_path / "seeded", env)
    explorer.survey()
    _, writes, left_out = _classify(explorer, specs)
    assert {"delete_observations", "delete_relations"} <= writes, left_out


def test_results_name_the_state_folder_as_the_servers_working_directory(tmp_path: Path) -> None:
    said = {"allowed": f"Allowed directories:\n{tmp_path}", "diff": f"Index: {tmp_path}/docs/plan.md", "n": 3}
    assert relative_to_state(said, tmp_path) == {"allowed": "Allowed directories:\n.", "diff": "Index: docs/plan.md",
                                                 "n": 3}


def test_a_malformed_state_probe_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["synth", "run", "--live", "--out", str(tmp_path), "--mcp-server", GIT,
            "--state-probe", 'git_status {"repo_path": ']
    assert main(argv) == 2
    assert "--state-probe" in capsys.readouterr().err
