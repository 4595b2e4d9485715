"""State folders a live MCP server needs before exploring it can reach its tools: a real git repository for
mcp-server-git, which has no tool that creates a file, so every path of its tools must already be there, and a
small tree of text files for a file server.

`git_repository(folder)` makes a small repository with history on two branches, a staged change, an unstaged
change and an untracked file, with fixed author, committer and dates, so its commit ids are the same on every
machine. Run the server with `GIT_ENV` in its environment too, so the commits its own tools make have fixed ids
as well (GitPython reads those variables), and exclude `GIT_VOLATILE` from the state digest: the index records
each copy's inode and change times and the reflogs the clock, so the state is read back through a probe instead
(`--state-probe 'git_status {"repo_path": "."}'`).

    python -m synth.mcp_templates git DIR       # or: files DIR
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

GIT_DATE = "2026-01-05T09:30:00+0000"
GIT_ENV = {"GIT_AUTHOR_DATE": GIT_DATE, "GIT_COMMITTER_DATE": GIT_DATE}
GIT_VOLATILE = [".git/index", ".git/logs/*"]
GIT_PROBE = {"name": "git_status", "arguments": {"repo_path": "."}}
_IDENTITY = {"user.name": "Ada Lovelace", "user.email": "ada@example.org", "commit.gpgsign": "false",
             "core.autocrlf": "false", "init.defaultBranch": "main"}


def _git(folder: Path, *args: str) -> None:
    config = [arg for key, value in _IDENTITY.items() for arg in ("-c", f"{key}={value}")]
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", *config, *args], cwd=folder, env=env, check=True, capture_output=True, timeout=60)


def _write(folder: Path, rel: str, text: str) -> None:
    path = folder / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def git_repository(folder: str | Path) -> Path:
    """Make the repository in `folder` (created; it must not hold one yet) and return it. Raises
    subprocess.CalledProcessError naming the git command that failed."""
    root = Path(folder)
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q", "-b", "main", ".")
    for key, value in _IDENTITY.items():  # the server's own commits use the repository's identity
        if key != "init.defaultBranch":
            _git(root, "config", key, value)
    _write(root, "README.md", "# Harbor\n\nA small tide-table service.\n")
    _write(root, "notes.txt", "tides at dawn\n")
    _git(root, "add", "README.md", "notes.txt")
    _git(root, "commit", "-q", "-m", "Start the harbor notes")
    _write(root, "docs/plan.md", "# Plan\n\n- publish the tide tables\n")
    _git(root, "add", "docs/plan.md")
    _git(root, "commit", "-q", "-m", "Plan the first release")
    _git(root, "checkout", "-q", "-b", "release")
    _write(root, "CHANGES.md", "## 0.1\n\n- tide tables\n")
    _git(root, "add", "CHANGES.md")
    _git(root, "commit", "-q", "-m", "Draft the release notes")
    _git(root, "checkout", "-q", "main")
    _write(root, "docs/plan.md", "# Plan\n\n- publish the tide tables\n- add moon phases\n")
    _git(root, "add", "docs/plan.md")  # a staged change
    _write(root, "notes.txt", "tides at dawn\nstorm warning at noon\n")  # an unstaged change
    _write(root, "todo.md", "- check the buoys\n")  # an untracked file
    return root


def file_tree(folder: str | Path) -> Path:
    """Write a few text files in two folders under `folder` (created) and return it."""
    root = Path(folder)
    _write(root, "readme.txt", "Harbor office: tide tables and notices.\n")
    _write(root, "docs/plan.md", "# Plan\n\n- publish the tide tables\n- add moon phases\n")
    _write(root, "docs/notices/storm.md", "Storm warning at noon.\n")
    _write(root, "data/tides.csv", "day,high,low\nmon,4.2,0.8\ntue,4.4,0.7\n")
    return root


def main(argv: list[str]) -> int:
    makers = {"git": git_repository, "files": file_tree}
    if len(argv) != 2 or argv[0] not in makers:
        print("usage: python -m synth.mcp_templates git|files DIR", file=sys.stderr)
        return 2
    print(makers[argv[0]](argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
