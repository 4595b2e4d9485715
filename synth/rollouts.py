"""Rollouts, filter and export: roll a policy out on synthesized envs, keep what passes, write SFT JSONL.

The default policy is the fair planner (synth.planner): it asks the user, authenticates, confirms before writes
and retries transient errors, using only what the conversation holds. Rollouts use the env's user simulator and
controlled tool failures (`failure_rate`, seeded per episode). Each trajectory is one JSONL line keyed by (env,
task, k), so an interrupted run resumes without duplicates; its components are the env's rubric (state, exact
answers, policy rules). Export keeps trajectories whose every component is 1.0, proves with `unseen_values` that no tool
call carries a value not seen earlier in the conversation, and writes OpenAI-format
`{"messages": [...], "tools": "<json>"}` lines that `datasets.load_dataset("json")` and TRL's SFTTrainer read
(tools as a JSON string, which TRL decodes, so rows with different tool schemas share one Arrow type).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envgym.env import ToolWorldEnv
from envgym.loader import EnvironmentData, load_environment
from envgym.play.episode import run_episode
from envgym.play.make import make_policy
from envgym.play.policies import OraclePolicy, Policy
from envgym.registry import env_dirs
from envgym.world.spec import TaskSpec
from synth.planner import FairPlanner
from synth.program import Program
from synth.seeds import canonical_json, item_seed
from synth.store import read_jsonl, with_id


def _policy(name: str, data: EnvironmentData, task: TaskSpec, seed: int, **kwargs: Any) -> Policy:
    if name == "fair":
        return FairPlanner(Program.model_validate(task.meta["program"]))
    # The oracle needs the env's own data: synthesized folders are not necessarily registered.
    return OraclePolicy(data) if name == "oracle" else make_policy(name, seed=seed, **kwargs)


def rollout(root: str | Path, out: str | Path, *, policy: str = "fair", n: int = 4, seed: int = 0,
            failure_rate: float = 0.0, user: str = "scripted", user_model: Any = None,
            advance: Callable[[int], None] | None = None, max_tasks: int | None = None,
            max_steps: int | None = None, **policy_kwargs: Any) -> list[dict[str, Any]]:
    """Run `n` episodes per task of every env under `root` (the first `max_tasks` tasks, in folder and file order,
    when given; at most `max_steps` turns each, when given), appending trajectories to `out`; returns all of them.
    `advance(total)` is called once per episode (the CLI draws progress with it)."""
    out = Path(out)
    existing = read_jsonl(out)
    done = {(r["env"], r["task_id"], r["k"]) for r in existing}
    jobs = []
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        jobs += [(data, t.id, k) for t in data.tasks for k in range(n)]
    jobs = jobs if max_tasks is None else jobs[:max_tasks * n]
    envs: dict[str, ToolWorldEnv] = {}
    with out.open("a") as sink:
        for data, task_id, k in jobs:
            if advance:
                advance(len(jobs))
            if (data.name, task_id, k) in done:
                continue
            episode_seed = item_seed(seed, "rollouts", f"{data.name}/{task_id}", k) % 2**31
            env = envs.get(data.name)
            if env is None:
                env = envs[data.name] = ToolWorldEnv(data=data, failure_rate=failure_rate, user=user,
                                                     user_model=user_model, max_steps=max_steps)
            task = data.task(task_id)
            agent = _policy(policy, data, task, episode_seed, **policy_kwargs)
            traj = run_episode(env, agent, seed=episode_seed, options={"task_id": task_id})
            components = dict(traj.reward_components)
            record = with_id({"env": data.name, "task_id": task_id, "k": k, "seed": episode_seed, "policy": policy,
                              "failure_rate": failure_rate, "reward": traj.reward,
                              "components": components, "messages": traj.messages,
                              "tools": traj.tools, "steps": traj.steps, "tool_errors": traj.tool_errors})
            sink.write(canonical_json(record) + "\n")
            sink.flush()
            existing.append(record)
    for env in envs.values():
        env.close()
    return existing


def passes(record: dict[str, Any]) -> bool:
    """The verifiable rubric passed: every reward component (state, assertions, outputs) is 1.0."""
    components = record.get("components") or {}
    return bool(components) and all(v == 1.0 for v in components.values())


def sft_example(record: dict[str, Any]) -> dict[str, Any]:
    """One trajectory as an OpenAI messages + tools training example, ending on the agent's last turn."""
    messages = []
    for m in record["messages"]:
        clean: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        if m.get("tool_calls"):
            clean["tool_calls"] = [{"id": c["id"], "type": "function",
                                    "function": {"name": c["function"]["name"],
                                                 "arguments": c["function"]["arguments"]}} for c in m["tool_calls"]]
        if m["role"] == "tool":
            clean["tool_call_id"] = m["tool_call_id"]
            clean["name"] = m.get("name", "")
        messages.append(clean)
    while messages and messages[-1]["role"] != "assistant":
        messages.pop()
    return {"messages": messages, "tools": json.dumps(record["tools"], sort_keys=True, ensure_ascii=False)}


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [x for v in value.values() for x in _leaves(v)]
    if isinstance(value, list):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _seen(value: Any, text: str) -> bool:
    if isinstance(value, bool) or value is None:
        return True
    forms = {f"{value:g}", str(value)} if isinstance(value, float) else {str(value)}
    return any(re.search(rf"(?<![\w.]){re.escape(f)}(?![\w])", text) for f in forms)


def unseen_values(messages: list[dict[str, Any]]) -> list[str]:
    """Tool-call argument values that no earlier user or tool message contains: the fairness checker. Empty for a
    trajectory whose every call uses only what the conversation had shown."""
    problems = []
    heard = ""
    for m in messages:
        for call in m.get("tool_calls") or []:
            fn = call.get("function", {})
            args = json.loads(fn.get("arguments") or "{}")
            problems += [f"{fn.get('name')}: {v!r}" for v in _leaves(args) if not _seen(v, heard)]
        if m.get("role") in ("user", "tool"):
            heard += "\n" + str(m.get("content") or "")
    return problems


def export_sft(rollouts: str | Path, out: str | Path) -> dict[str, int]:
    """Write the passing trajectories of `rollouts` as SFT JSONL (one example per distinct conversation); a
    trajectory that uses an unseen value is never exported and is counted."""
    records = read_jsonl(Path(rollouts))
    kept: dict[str, dict[str, Any]] = {}
    unfair = 0
    for record in sorted(records, key=lambda r: r["id"]):
        if passes(record):
            example = sft_example(record)
            if unseen_values(example["messages"]):
                unfair += 1
                continue
            kept.setdefault(canonical_json(example), example)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("".join(canonical_json(e) + "\n" for e in kept.values()))
    return {"trajectories": len(records), "passed": sum(passes(r) for r in records), "examples": len(kept),
            "unseen_value_trajectories": unfair}
