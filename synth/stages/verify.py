"""Stage 5, verification: a task is kept only if its reference solution replays, the protocol oracle and the fair
planner score 1.0, and every negative control scores 0.

Controls: do-nothing, random calls, guess-sprayer, skip-authentication, skip-confirmation (only where the task
writes: on a read-only task it is the oracle itself) and call-every-write. Each runs as a real episode of the env
with the scripted user; the score is the env's reward times the rule components of `synth.rules`.
"""

from __future__ import annotations

from typing import Any

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData
from envgym.policies import Policy, RandomPolicy, RefusePolicy
from envgym.runner import run_episode
from envgym.world.spec import TaskSpec, ToolCall
from synth.planner import FairPlanner, GuessSprayer, ProtocolOracle
from synth.program import Program
from synth.rules import Rules, rule_components
from synth.stages.toolcheck import witness_arguments

RANDOM_TURNS = 12
CONTROLS = ("do_nothing", "random", "guess_sprayer", "skip_auth", "skip_confirm", "all_writes")


def world_rules(data: EnvironmentData) -> Rules:
    synth = data.world.meta["synth"]["rules"]
    return Rules(tuple(synth["authenticate_with"]), tuple(synth["requires_auth"]),
                 tuple(t.name for t in data.world.tools if not t.read_only))


def score(env: ToolWorldEnv, policy: Policy, task: TaskSpec, rules: Rules, seed: int = 0) -> tuple[float, Any]:
    """The episode's reward times the rule components, and the trajectory."""
    traj = run_episode(env, policy, seed=seed, options={"task_id": task.id})
    solution = [(c.name, c.arguments) for c in task.solution]
    rules_part = rule_components(traj.messages, rules, solution, task.meta.get("answers", []))
    total = traj.reward
    for value in rules_part.values():
        total *= value
    return total, traj


def every_write(data: EnvironmentData) -> list[ToolCall]:
    """One valid call of each write tool on the initial world (what the call-every-write control makes)."""
    calls = []
    for tool in data.world.tools:
        if not tool.read_only:
            found = witness_arguments(data.world, data.initial, tool)
            if found is not None:
                calls.append(ToolCall(name=tool.name, arguments=found[0]))
    return calls


def verify_tasks(data: EnvironmentData, seed: int = 0) -> dict[str, dict[str, float]]:
    """task id -> score of the oracle, the fair planner and every control (absent where not applicable)."""
    env = ToolWorldEnv(data=data, guard=False, tool_rewards=False)
    # Random calls for a bounded number of turns: past that they only cost time.
    short = ToolWorldEnv(data=data, guard=False, tool_rewards=False, max_steps=RANDOM_TURNS)
    rules = world_rules(data)
    writes = set(rules.writes)
    extra = every_write(data)
    sprayer = GuessSprayer(data.initial)
    out: dict[str, dict[str, float]] = {}
    for task in data.tasks:
        try:
            data.target_hash(task)
        except ValueError:
            out[task.id] = {"replay": 0.0}
            continue
        has_writes = any(c.name in writes for c in task.solution)
        policies: dict[str, Policy] = {
            "oracle": ProtocolOracle(task, writes),
            "fair": FairPlanner(Program.model_validate(task.meta["program"])),
            "do_nothing": RefusePolicy(),
            "random": RandomPolicy(seed),
            "guess_sprayer": sprayer,
            "skip_auth": ProtocolOracle(task, writes, skip=set(rules.authenticate_with)),
            "all_writes": ProtocolOracle(task, writes, extra=[c for c in extra if c not in task.solution]),
        }
        if has_writes:
            policies["skip_confirm"] = ProtocolOracle(task, writes, confirm=False)
        out[task.id] = {"replay": 1.0, **{name: score(short if name == "random" else env, p, task, rules, seed)[0]
                                           for name, p in policies.items()}}
    env.close()
    short.close()
    return out


def rejected_by(scores: dict[str, float]) -> list[str]:
    """Why a task is not kept: the checks it failed (empty when it is kept)."""
    failed = [k for k in ("replay", "oracle", "fair") if scores.get(k, 0.0) < 1.0]
    return failed + [k for k in CONTROLS if scores.get(k, 0.0) > 0.0]
