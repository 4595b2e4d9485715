"""envgym worlds served through OpenEnv's own server code and played with OpenEnv's own clients
(envgym.integrations.openenv): oracle episodes over concurrent sessions get the in-process rewards, components and
state hashes, and the MCP tool listing is `info["tools"]`.

OpenEnv pins mcp and fastmcp against ours, so the server and the client run in its venv (`scripts/install.sh --dev`
makes ~/.cache/envgym/openenv), with this checkout's envgym on PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData, load_environment
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy
from envgym.registry import env_dirs, find_env_dir
from synth.pipeline import SynthConfig, run_pipeline

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("ENVGYM_OPENENV_VENV", Path.home() / ".cache" / "envgym" / "openenv"))
START_TIMEOUT_S = 240  # importing OpenEnv (gradio, fastmcp) on two busy cores
TASKS = 3  # per world, played at once: one session each


def venv_python() -> str:
    python = VENV / "bin" / "python"
    assert python.is_file(), f"{python} is missing: run `bash scripts/install.sh --dev`"
    return str(python)


def run_in_venv(*args: str) -> str:
    result = subprocess.run([venv_python(), "-m", "envgym.integrations.openenv", *args], capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def synth_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("synth") / "suite"
    run_pipeline(SynthConfig(seed=3, domains=1, tasks_per_env=4), out)
    return out


@pytest.fixture(scope="module")
def servers(synth_suite: Path) -> Iterator[dict[str, tuple[str, EnvironmentData, list[str]]]]:
    """One OpenEnv server per world, started at once: name -> (url, its data, the extra CLI flags)."""
    synth_dir = env_dirs(synth_suite)[0]
    worlds = {"retail": (find_env_dir("retail"), []), "travel": (find_env_dir("travel"), []),
              "workspace": (find_env_dir("workspace"), []),
              synth_dir.name: (synth_dir, ["--env-dir", str(synth_suite)])}
    started: dict[str, tuple[str, EnvironmentData, list[str]]] = {}
    processes = []
    try:
        for name, (folder, flags) in worlds.items():
            port = free_port()
            processes.append(subprocess.Popen(
                [venv_python(), "-m", "envgym.integrations.openenv", "serve", name, "--port", str(port), *flags],
                env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE))
            started[name] = (f"http://127.0.0.1:{port}", load_environment(str(folder)), flags)
        deadline = time.monotonic() + START_TIMEOUT_S
        for (url, _, _), process in zip(started.values(), processes, strict=True):
            while True:
                assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
                try:
                    if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline, f"{url} did not come up in {START_TIMEOUT_S} s"
                time.sleep(0.5)
        yield started
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)


def in_process(data: EnvironmentData, task_id: str, seed: int) -> dict[str, object]:
    env = ToolWorldEnv(data=data)
    trajectory = run_episode(env, OraclePolicy(data), seed=seed, options={"task_id": task_id})
    assert env.state is not None
    return {"reward": trajectory.reward, "components": trajectory.reward_components, "steps": trajectory.steps,
            "state_hash": env.state.hash()}


@pytest.fixture(scope="module")
def played(servers: dict[str, tuple[str, EnvironmentData, list[str]]], tmp_path_factory: pytest.TempPathFactory,
           synth_suite: Path) -> list[dict[str, object]]:
    """TASKS oracle episodes per world, all at once through one OpenEnv client process (one session each)."""
    jobs = [{"env": name, "url": url, "task": task.id, "seed": i, "env_dir": str(synth_suite) if flags else None,
             "typed": i % 2 == 1}  # every other episode sends its calls as typed tool_calls, not text
            for name, (url, data, flags) in servers.items() for i, task in enumerate(data.tasks[:TASKS])]
    spec = tmp_path_factory.mktemp("openenv") / "jobs.json"
    spec.write_text(json.dumps(jobs))
    return [json.loads(line) for line in run_in_venv("play", "--jobs", str(spec)).splitlines()]


@pytest.mark.parametrize("world", ["retail", "travel", "workspace", "synth"])
def test_openenv_client_plays_oracle_episodes_with_in_process_rewards(
        world: str, servers: dict[str, tuple[str, EnvironmentData, list[str]]],
        played: list[dict[str, object]]) -> None:
    name = world if world != "synth" else next(n for n in servers if n not in ("retail", "travel", "workspace"))
    _, data, _ = servers[name]
    rows = [r for r in played if r["env"] == name]
    assert [r["task_id"] for r in rows] == [t.id for t in data.tasks[:TASKS]]
    assert [r["typed"] for r in rows] == [i % 2 == 1 for i in range(TASKS)]
    for i, row in enumerate(rows):
        expected = in_process(data, str(row["task_id"]), i)
        assert row["reward"] == expected["reward"] == 1.0
        assert (row["components"], row["steps"], row["state_hash"]) == (
            expected["components"], expected["steps"], expected["state_hash"])
        assert row["world_hash"] == row["state_hash"]  # the session's state() reports the same world


def test_mcp_tool_listing_is_info_tools(servers: dict[str, tuple[str, EnvironmentData, list[str]]]) -> None:
    url, data, _ = servers["retail"]
    email = next(iter(data.initial.tables["users"].values()))["email"]
    shown = json.loads(run_in_venv("tools", "--url", url, "--call", "find_user_id_by_email",
                                   "--arguments", json.dumps({"email": email})))
    _, info = ToolWorldEnv(data=data).reset(seed=0)
    assert [(t["name"], t["description"], t["input_schema"]) for t in shown["tools"]] == [
        (t["function"]["name"], t["function"]["description"], t["function"]["parameters"]) for t in info["tools"]]
    user = next(k for k, u in data.initial.tables["users"].items() if u["email"] == email)
    assert user in json.dumps(shown["result"])
