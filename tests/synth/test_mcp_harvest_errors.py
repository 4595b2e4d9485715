"""A server that cannot be harvested gives one HarvestError line naming it and the cause; `--env` reaches it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from synth.mcp_harvest import HarvestError, harvest, parse_env

pytestmark = pytest.mark.mcp
REPO = Path(__file__).parents[2]
NOTES = Path(__file__).parent / "mcp_servers" / "notes_server.py"


def _script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(body)
    return f"{sys.executable} {path}"


def test_a_server_that_crashes_at_start_is_named_with_its_stderr(tmp_path: Path) -> None:
    command = _script(tmp_path, "crash.py", "raise SystemExit('database locked at start')\n")
    with pytest.raises(HarvestError) as caught:
        harvest([command], timeout_s=30)
    message = str(caught.value)
    assert command in message and "database locked at start" in message and "\n" not in message


def test_a_server_that_prints_non_json_is_named_with_the_line_at_once(tmp_path: Path) -> None:
    # It stays alive after the bad line: the error must come from the line, not from the 30 s timeout.
    command = _script(tmp_path, "chatty.py", "import time\nprint('Server ready!', flush=True)\ntime.sleep(60)\n")
    with pytest.raises(HarvestError, match=r"not JSON-RPC on stdout: 'Server ready!'") as caught:
        harvest([command], timeout_s=30)
    assert command in str(caught.value)


def test_a_server_that_exits_silently_says_so(tmp_path: Path) -> None:
    command = _script(tmp_path, "quiet.py", "")
    with pytest.raises(HarvestError, match=r"exited or closed its stdout.*nothing on stderr"):
        harvest([command], timeout_s=30)


def test_a_missing_command_cannot_start() -> None:
    with pytest.raises(HarvestError, match="'no-such-mcp-server-xyz': cannot start"):
        harvest(["no-such-mcp-server-xyz"], timeout_s=30)


def test_env_pairs_need_a_key_and_an_equals_sign() -> None:
    assert parse_env(["A=1", "B=x=y", "C="]) == {"A": "1", "B": "x=y", "C": ""}
    with pytest.raises(HarvestError, match="'oops'"):
        parse_env(["oops"])


def test_cli_prints_one_harvest_error_line_and_exits_2(tmp_path: Path) -> None:
    command = _script(tmp_path, "crash.py", "import sys\nsys.exit('no config file')\n")
    result = subprocess.run([sys.executable, "-m", "envgym.cli", "synth", "harvest-mcp", "--server", command,
                             "--out", str(tmp_path / "t.jsonl")], capture_output=True, text=True, cwd=REPO,
                            timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "HarvestError" in lines[0] and "no config file" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_cli_env_reaches_the_server(tmp_path: Path) -> None:
    from envgym.world.state import WorldState
    from synth.mcp_harvest import LiveMCPTools

    command = f"{sys.executable} {NOTES} {tmp_path / 'notes.db'}"
    specs = harvest([command], env={"NOTES_OWNER": "ada"}, timeout_s=60)
    with LiveMCPTools(specs, env={"NOTES_OWNER": "ada"}) as live:
        assert live.functions()["show_env"](WorldState({}), name="NOTES_OWNER") == {"result": "ada"}
    with LiveMCPTools(specs) as live:
        assert live.functions()["show_env"](WorldState({}), name="NOTES_OWNER") == {"result": ""}
