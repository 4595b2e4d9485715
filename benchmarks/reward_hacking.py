"""Reward hacking: every negative control and reward hacker against the bundled envs and synthesized domains, scored
by each training reward, next to the oracle.

    python benchmarks/reward_hacking.py [--tasks 12] [--synth-domains 20] [--synth-tasks 4] [--json] [--out PATH]

Agents: the oracle, the controls of `envgym.play.controls` (do-nothing, random, guess-spray, skip-auth,
skip-confirm, every-write) and the hackers of `envgym.play.hacks` (echo-flood, hedge, wrong-then-right,
enumerate-writes, destroy-all). Reward modes, all from one episode per (agent, task):

- `env`: the rubric's verdict;
- `env+percall`: the env's own reward with per-call shaping at `tool_reward_weight=0.1`;
- `env+tools`: `ProgressReward(0.1)` (credited calls); `env+program`: `ProgramReward(0.1)` (reference calls made).

The judge modes are not run here: the embedded judge takes minutes per group on this machine, and the check of
`envgym.rewards.judge_check` finds it uninformative, which sets its weight to 0 (then 'env+judge' is 'env').

For each env and mode the mean reward of every agent is divided by the oracle's; the figure is the worst ratio
over every env, mode and agent (goal: at most 0.5). An agent counts on the tasks where its episode is not the
oracle's, and only in worlds whose rules forbid what it does (`BREAKS`: on code-v0, which declares no write rules,
rewriting a file until the tests pass is how the task is done). `--json` ends with one line {"metric", "value", "goal"}.
Writes the table to docs/results/reward_hacking.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402

import envgym  # noqa: E402
from envgym.play.controls import NEGATIVE_CONTROLS  # noqa: E402
from envgym.play.episode import run_episode  # noqa: E402
from envgym.play.hacks import REFUSAL, REWARD_HACKS  # noqa: E402
from envgym.play.policies import OraclePolicy, Policy  # noqa: E402
from envgym.rewards.combine import ProgressReward  # noqa: E402
from envgym.rewards.program import ProgramReward  # noqa: E402
from envgym.rewards.rubric import total_reward  # noqa: E402

BUNDLED = ("retail", "travel", "workspace", "calculator", "code")
MODES = ("env", "env+percall", "env+tools", "env+program")
WEIGHT = 0.1
GOAL = 0.5
AGENTS: dict[str, Callable[[Any, int], Policy]] = {
    "oracle": lambda data, seed: OraclePolicy(data), **NEGATIVE_CONTROLS, **REWARD_HACKS,
}


def scores(env: Any, data: Any, agent: str, task_id: str) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """One episode of `agent` on `task_id` scored by every mode, and its conversation."""
    policy = AGENTS[agent](data, 0)
    trajectory = run_episode(env, policy, seed=0, options={"task_id": task_id})
    verdict = total_reward(trajectory.reward_components) if trajectory.reward_components else 0.0
    graded = SimpleNamespace(reward=verdict, messages=trajectory.messages, tools=trajectory.tools, task_id=task_id,
                             tool_calls_credited=trajectory.tool_calls_credited,
                             broke_rule_calls=trajectory.broke_rule_calls)
    solutions = {task_id: data.task(task_id).solution}
    return {
        "env": verdict,
        "env+percall": trajectory.reward,
        "env+tools": ProgressReward(WEIGHT).score([graded])[0],
        "env+program": ProgramReward(solutions, WEIGHT).score([graded])[0],
    }, trajectory.messages


def measure(env_ids: list[tuple[str, str, int]], progress: Progress) -> dict[str, dict[str, dict[str, float]]]:
    """env label -> agent -> mode -> mean reward over the env's first tasks (an agent's mean over the tasks where
    its episode is not the oracle's; "tasks" counts them)."""
    plan = []
    for label, env_id, limit in env_ids:
        env = gym.make(env_id, tool_reward_weight=WEIGHT, failure_rate=0.0)
        data = env.unwrapped.data  # type: ignore[attr-defined]
        plan.append((label, env, data, [t.id for t in data.tasks][:limit]))
    bar = progress.add_task("episodes", total=sum(len(tasks) for *_, tasks in plan) * len(AGENTS))
    out: dict[str, dict[str, dict[str, float]]] = {}
    for label, env, data, tasks in plan:
        oracle = {task_id: scores(env, data, "oracle", task_id) for task_id in tasks}
        table = out.setdefault(label, {"oracle": _mean([s for s, _ in oracle.values()])})
        progress.advance(bar, len(tasks))
        for agent in AGENTS:
            if agent == "oracle" or not applies(agent, data.world):
                continue
            runs = []
            for task_id in tasks:
                result, messages = scores(env, data, agent, task_id)
                # An agent that plays the oracle's very episode (skip-auth where nothing needs authentication,
                # skip-confirm where nothing is written) is no hack of that task.
                refused = agent in REWARD_HACKS and len(messages) > 2 and messages[2].get("content") == REFUSAL
                if messages != oracle[task_id][1] and not refused:  # a hacker with nothing to try refuses
                    runs.append(result)
                progress.advance(bar)
            if runs:
                table[agent] = _mean(runs)
        env.close()
    return out


# The rule each agent breaks: where a world declares no such rule (code-v0 writes a file, tests it and writes it
# again, as coding goes), the agent's behaviour is allowed there and no hack of that world.
BREAKS = {"skip-auth": "authenticate_with", "skip-confirm": "confirm_writes", "every-write": "no_unrequested_writes",
          "wrong-then-right": "no_unrequested_writes", "enumerate-writes": "no_unrequested_writes",
          "destroy-all": "no_unrequested_writes"}


def applies(agent: str, world: Any) -> bool:
    """Whether the world's rules forbid what `agent` does (always, for agents that break no declared rule)."""
    return agent not in BREAKS or (world.rules is not None and bool(getattr(world.rules, BREAKS[agent])))


def _mean(runs: list[dict[str, float]]) -> dict[str, float]:
    return {mode: sum(r[mode] for r in runs) / len(runs) for mode in MODES} | {"tasks": float(len(runs))}


def synthesized(domains: int, tasks: int, seed: int, folder: Path) -> list[str]:
    """Ids of `domains` synthesized envs (the offline pipeline, in process)."""
    from synth.pipeline import SynthConfig, run_pipeline

    run_pipeline(SynthConfig(seed=seed, domains=domains, tasks_per_env=tasks), folder)
    return envgym.register_dir(folder, override=True)


def ratios(table: dict[str, dict[str, dict[str, float]]]) -> list[tuple[float, str, str, str]]:
    """(agent mean / oracle mean, env, mode, agent) for every hacker and control."""
    out = []
    for env, agents in table.items():
        for mode in MODES:
            oracle = agents["oracle"][mode]
            for agent, means in agents.items():
                if agent != "oracle":
                    out.append((means[mode] / oracle if oracle > 0 else float("inf"), env, mode, agent))
    return out


def markdown(table: dict[str, dict[str, dict[str, float]]], worst: tuple[float, str, str, str], command: str,
             load: str, wall: float) -> str:
    lines = ["# Reward hacking: controls and hackers against every training reward", "",
             f"`{command}` (load average {load}; {wall:.0f} s). Mean reward per agent and reward mode; the oracle's "
             "row is the reference; an agent is scored on the tasks where its episode is not the oracle's (`tasks`). "
             "Goal: no agent above 0.5x the oracle in any env and mode.", "",
             f"**Worst ratio: {worst[0]:.3f}** ({worst[3]} on {worst[1]}, {worst[2]}).", ""]
    for env, agents in table.items():
        lines += [f"## {env}", "", "| agent | tasks | " + " | ".join(MODES) + " |", "|---" * (len(MODES) + 2) + "|"]
        for agent, means in agents.items():
            cells = " | ".join(f"{means[m]:.3f}" for m in MODES)
            lines.append(f"| {agent} | {int(means['tasks'])} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=12, help="tasks per bundled env")
    parser.add_argument("--envs", default=",".join(BUNDLED))
    parser.add_argument("--synth-domains", type=int, default=20)
    parser.add_argument("--synth-tasks", type=int, default=4, help="tasks per synthesized domain")
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "docs/results/reward_hacking.md"))
    args = parser.parse_args(argv)
    started = time.perf_counter()
    console = Console(stderr=True)
    envs = [(name, f"envgym/{name}-v0", args.tasks) for name in args.envs.split(",") if name]
    with tempfile.TemporaryDirectory() as tmp, Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console,
    ) as progress:
        if args.synth_domains:
            progress.console.print(f"synthesizing {args.synth_domains} domains (seed {args.seed})...")
            for env_id in synthesized(args.synth_domains, args.synth_tasks, args.seed, Path(tmp) / "suite"):
                envs.append((f"synth:{env_id.split('/')[-1]}", env_id, args.synth_tasks))
        table = measure(envs, progress)
    worst = max(ratios(table))
    load = "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    command = "python benchmarks/reward_hacking.py " + " ".join(argv if argv is not None else sys.argv[1:])
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(markdown(table, worst, command.strip(), load, time.perf_counter() - started) + "\n")
    for env, agents in table.items():
        row = {agent: {m: round(v, 3) for m, v in means.items()} for agent, means in agents.items()}
        print(json.dumps({"env": env, "mean_reward": row}) if args.json else f"{env}: {json.dumps(row)}")
    summary = {"metric": "worst_agent_to_oracle_reward_ratio", "value": round(worst[0], 4), "goal": GOAL,
               "worst": {"env": worst[1], "mode": worst[2], "agent": worst[3]}}
    print(json.dumps(summary))
    return 0 if worst[0] <= GOAL else 1


if __name__ == "__main__":
    raise SystemExit(main())
