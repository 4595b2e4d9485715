"""Synthesized worlds in a sandbox (issue 15, part 4): `gym.make(id, sandbox=...)` runs the world, its tools and its
state inside the sandbox with the agent-facing contract unchanged. The same seed and actions give identical
observations, rewards and final state hashes in-process and sandboxed, over 20 tasks of 5 synthesized envs, in one
sandbox reused across worlds and tasks (reset between tasks)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import envgym
from envgym.env import ToolWorldEnv
from envgym.play.policies import OraclePolicy, RandomPolicy
from envgym.sandbox import Sandbox, SandboxSpec, create_sandbox
from envgym.world.spec import ToolSpec
from synth.stages.mcp import run_mcp

TASKS_PER_ENV = 4


def _mcp_tools(server: str, noun: str, fields: dict[str, str]) -> list[ToolSpec]:
    def tool(name: str, props: dict[str, str], required: list[str]) -> ToolSpec:
        return ToolSpec(name=name, description=name, source={"kind": "mcp", "server": [server], "server_name": server,
                                                             "tool": name},
                        parameters={"type": "object", "properties": {p: {"type": t} for p, t in props.items()},
                                    "required": required})
    key = f"{noun}_id"
    return [tool(f"create_{noun}", {key: "string", **fields}, [key, *fields]),
            tool(f"get_{noun}", {key: "string"}, [key]), tool(f"list_{noun}s", fields, []),
            tool(f"delete_{noun}", {key: "string"}, [key])]


@pytest.fixture(scope="module")
def five_worlds(small_suite: Path, tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """Three procedural worlds and two MCP-grounded ones, registered; their ids."""
    mcp_root = tmp_path_factory.mktemp("mcp-worlds")
    specs = (_mcp_tools("tickets", "ticket", {"title": "string", "priority": "integer"})
             + _mcp_tools("shelf", "book", {"author_name": "string", "pages": "integer"}))
    run_mcp(specs, mcp_root, seed=2, tasks_per_env=TASKS_PER_ENV)
    ids = envgym.register_dir(small_suite) + envgym.register_dir(mcp_root)
    assert len(ids) == 5
    return ids


def _play(env: gym.Env[Any, Any], task_id: str, seed: int, actions: list[Any] | None,
          policy: Any = None) -> tuple[list[Any], list[Any]]:
    """(the actions taken, what the agent and operator saw: observations, rewards, ends, final info but wall time)."""
    obs, info = env.reset(seed=seed, options={"task_id": task_id})
    # Copies: an in-process env's info holds its live conversation, which the next step extends.
    seen: list[Any] = [obs, copy.deepcopy(info)]
    taken: list[Any] = []
    done = False
    while not done:
        action = actions[len(taken)] if actions is not None else policy.act(obs, info)
        taken.append(action)
        obs, reward, terminated, truncated, info = env.step(action)
        done = terminated or truncated
        seen.append([obs, reward, terminated, truncated,
                     copy.deepcopy({k: v for k, v in info.items() if k != "wall_s"})])
    assert "state_hash" in info
    return taken, seen


def _difference(here: Any, there: Any, where: str = "") -> str:
    """Where two JSON-like values first differ (for a failure message that names it)."""
    if isinstance(here, dict) and isinstance(there, dict):
        for key in sorted(set(here) | set(there), key=str):
            if here.get(key) != there.get(key):
                return _difference(here.get(key), there.get(key), f"{where}.{key}")
    if isinstance(here, list) and isinstance(there, list) and len(here) == len(there):
        for i, (a, b) in enumerate(zip(here, there, strict=True)):
            if a != b:
                return _difference(a, b, f"{where}[{i}]")
    return f"{where}: {str(here)[:300]!r} in-process, {str(there)[:300]!r} sandboxed"


def _compare(ids: list[str], box: Sandbox) -> int:
    played = 0
    for env_id in ids:
        local = gym.make(env_id)
        inner = local.unwrapped
        assert isinstance(inner, ToolWorldEnv)
        sandboxed = gym.make(env_id, sandbox=box)
        for i, task in enumerate(inner.data.tasks[:TASKS_PER_ENV]):
            policy = OraclePolicy(inner.data) if i % 2 == 0 else RandomPolicy(seed=i)
            actions, here = _play(local, task.id, seed=i, actions=None, policy=policy)
            _, there = _play(sandboxed, task.id, seed=i, actions=actions)
            assert there == here, f"{env_id} task {task.id}: {_difference(here, there)}"
            played += 1
        sandboxed.close()
        local.close()
    return played


@pytest.fixture
def local_box() -> Iterator[Sandbox]:
    box = create_sandbox(SandboxSpec(), backend="local")
    yield box
    box.close()


def _expected(ids: list[str]) -> int:
    """Episodes `_compare` plays: up to TASKS_PER_ENV of each world (a small domain may keep fewer tasks)."""
    return sum(min(TASKS_PER_ENV, len(gym.make(i).unwrapped.data.tasks)) for i in ids)  # type: ignore[attr-defined]


def test_worlds_in_a_local_sandbox_match_in_process_episodes(five_worlds: list[str], local_box: Sandbox) -> None:
    expected = _expected(five_worlds)
    assert expected >= 3 * len(five_worlds)
    assert _compare(five_worlds, local_box) == expected


@pytest.mark.docker
def test_worlds_in_one_docker_container_match_in_process_episodes(five_worlds: list[str]) -> None:
    docker = pytest.importorskip("docker")
    from envgym.sandbox.docker import docker_available
    from envgym.sandbox.image import ensure_image

    if not docker_available():
        pytest.fail("no Docker engine on this machine (scripts/ci_docker.sh starts one)")
    tag = ensure_image(docker.from_env(), quiet=True)
    box = create_sandbox(SandboxSpec(image=tag, memory_mb=1024), backend="docker")
    try:
        assert _compare(five_worlds, box) == _expected(five_worlds)
    finally:
        box.close()


def test_a_sandbox_that_cannot_host_worlds_is_refused(tmp_path: Path) -> None:
    from envgym.sandboxed import make_world_env

    with pytest.raises(envgym.world.errors.EnvConfigError, match="no environment folder"):
        make_world_env(tmp_path / "missing", sandbox="local")
