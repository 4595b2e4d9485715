"""envgym as a `verifiers` environment (envgym.integrations.verifiers), evaluated by verifiers' own `vf-eval` against
the session's real `transformers serve` (tests/llm/conftest.py).

verifiers 0.4 pins mcp and openai against ours, so it runs in its own venv (`scripts/install.sh --dev` makes it) as a
subprocess. The model is tiny: the test checks that verifiers played real envgym episodes (each model reply was an
action, the reward on the trace is the env's, replaying the actions in-process reaches the same state), not what the
model achieves.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import pytest

from envgym.env import ToolWorldEnv

if TYPE_CHECKING:
    from tests.llm.conftest import Server

pytestmark = [pytest.mark.model, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
VERIFIERS_VENV = Path(os.environ.get("ENVGYM_VERIFIERS_VENV", Path.home() / ".cache" / "envgym" / "verifiers"))
MAX_STEPS = 2
TASKS = 2
MAX_TOKENS = "16"  # every request is a 1-2k token prompt on CPU: keep the completions short
EVAL_TIMEOUT_S = 1800  # TASKS * MAX_STEPS completions, each slow on two busy cores; a hang still ends


def _replay(task_id: str, seed: int, actions: list[dict[str, Any]]) -> tuple[float, str]:
    """The reward and final state hash the same actions reach in-process."""
    env = gym.make("envgym/retail-v0", disable_env_checker=True, max_steps=MAX_STEPS).unwrapped
    assert isinstance(env, ToolWorldEnv)
    env.reset(seed=seed, options={"task_id": task_id})
    reward, done = 0.0, False
    for action in actions:
        assert not done, "the trace holds an action after the episode ended"
        _, r, terminated, truncated, _ = env.step(action)
        reward, done = float(r), terminated or truncated
    assert done and env.state is not None
    return reward, env.state.hash()


def test_vf_eval_plays_envgym_episodes_and_records_the_envs_reward(server: Server, tmp_path: Path) -> None:
    vf_eval = VERIFIERS_VENV / "bin" / "vf-eval"
    assert vf_eval.is_file(), f"{vf_eval} is missing: run `bash scripts/install.sh --dev`"
    before = server.settled_posts()
    command = [str(vf_eval), "envgym-verifiers", "--env.taskset.env", "retail",
               "--env.taskset.max-steps", str(MAX_STEPS), "-n", str(TASKS), "-m", server.model,
               "--client.base-url", server.base_url, "--sampling.max-tokens", MAX_TOKENS,
               "--no-push", "--no-rich", "-o", str(tmp_path), "--run.name", "run"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's envgym, whatever the venv was installed from
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=EVAL_TIMEOUT_S)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"

    episodes = [json.loads(line) for line in (tmp_path / "run" / "traces.jsonl").read_text().splitlines()]
    tasks = [t.id for t in gym.make("envgym/retail-v0", disable_env_checker=True).unwrapped.data.tasks][:TASKS]
    assert sorted(e["task"]["data"]["task_id"] for e in episodes) == sorted(tasks)
    calls = 0
    for episode in episodes:
        assert episode["ok"], episode.get("errors")
        [trace] = episode["traces"]
        record = trace["info"]["envgym"]
        # The conversation opens as the env opens it, and every model reply was one action.
        opening = [node["message"]["content"] for node in trace["nodes"][:2]]
        assert opening == [episode["task"]["data"]["system_prompt"], episode["task"]["data"]["prompt"]]
        assert record["ended"] in ("terminated", "truncated")  # no run limit here stops the agent first
        assert 1 <= len(record["actions"]) == len(trace["calls"]) == trace["metrics"]["envgym_steps"] <= MAX_STEPS
        reward, state_hash = _replay(record["task_id"], record["seed"], record["actions"])
        assert trace["rewards"]["envgym_reward"]["score"] == reward
        assert record["state_hash"] == state_hash
        calls += len(trace["calls"])
    # The actions came from the server: one chat completion each.
    assert server.settled_posts(before + calls) - before == calls, server.tail()
