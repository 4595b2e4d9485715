"""Stage 5, verification: a task is kept only if its reference solution replays, the oracle and the fair planner
score 1.0, and every negative control of `envgym.play.controls` scores 0.

Controls: do-nothing, random calls, guess-spray, skip-auth, skip-confirm (only where the task writes: on a
read-only task it is the oracle itself), every-write and no-tool (synth.notool: no call, the user's words echoed). Each runs as a real episode of the env with the scripted
user; the env's reward holds the rubric: state, exact answers without guessing, and the world's policy rules.
"""

from __future__ import annotations

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData
from envgym.play.controls import NEGATIVE_CONTROLS
from envgym.play.episode import run_episode
from envgym.play.policies import OraclePolicy, Policy
from synth.notool import NoToolPolicy
from synth.planner import FairPlanner
from synth.program import Program

RANDOM_TURNS = 12
NO_TOOL = "no-tool"
CONTROLS = (*NEGATIVE_CONTROLS, NO_TOOL)


def verify_tasks(data: EnvironmentData, seed: int = 0) -> dict[str, dict[str, float]]:
    """task id -> reward of the oracle, the fair planner and every control (absent where not applicable)."""
    env = ToolWorldEnv(data=data, guard=False, tool_rewards=False)
    # Random calls for a bounded number of turns: past that they only cost time.
    short = ToolWorldEnv(data=data, guard=False, tool_rewards=False, max_steps=RANDOM_TURNS)
    writes = {t.name for t in data.world.tools if not t.read_only}
    out: dict[str, dict[str, float]] = {}
    for task in data.tasks:
        try:
            data.target_hash(task)
        except ValueError:
            out[task.id] = {"replay": 0.0}
            continue
        policies: dict[str, Policy] = {"oracle": OraclePolicy(data),
                                       "fair": FairPlanner(Program.model_validate(task.meta["program"]))}
        for name, make in NEGATIVE_CONTROLS.items():
            if name != "skip-confirm" or any(c.name in writes for c in task.solution):
                policies[name] = make(data, seed)
        policies[NO_TOOL] = NoToolPolicy()
        scores = {"replay": 1.0}
        for name, policy in policies.items():
            episode_env = short if name == "random" else env
            scores[name] = run_episode(episode_env, policy, seed=seed, options={"task_id": task.id}).reward
        out[task.id] = scores
    env.close()
    short.close()
    return out


def rejected_by(scores: dict[str, float]) -> list[str]:
    """Why a task is not kept: the checks it failed (empty when it is kept)."""
    failed = [k for k in ("replay", "oracle", "fair") if scores.get(k, 0.0) < 1.0]
    return failed + [k for k in CONTROLS if scores.get(k, 0.0) > 0.0]
