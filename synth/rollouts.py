"""Stage 7, rollouts, filter and export: roll a policy out on synthesized envs, keep what passes, write SFT JSONL.

Rollouts use the env's user simulator and controlled tool failures (`failure_rate`, seeded per episode). Each
trajectory is one JSONL line keyed by (env, task, k), so an interrupted run resumes without duplicates. Export
keeps trajectories whose verifiable rubric passed (every reward component 1.0) and writes OpenAI-format
`{"messages": [...], "tools": "<json>"}` lines that `datasets.load_dataset("json")` and TRL's SFTTrainer read
(tools as a JSON string, which TRL decodes, so rows with different tool schemas share one Arrow type).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from envgym.env import ToolWorldEnv
from envgym.loader import load_environment
from envgym.play.episode import run_episode
from envgym.play.make import make_policy
from envgym.play.policies import OraclePolicy, Policy
from envgym.registry import env_dirs
from synth.seeds import canonical_json, item_seed
from synth.store import read_jsonl, with_id


def _policy(name: str, data: Any, seed: int, **kwargs: Any) -> Policy:
    # The oracle needs the env's own data: synthesized folders are not necessarily registered.
    return OraclePolicy(data) if name == "oracle" else make_policy(name, seed=seed, **kwargs)


def rollout(root: str | Path, out: str | Path, *, policy: str = "oracle", n: int = 4, seed: int = 0,
            failure_rate: float = 0.0, user: str = "scripted", user_model: Any = None, progress: bool = True,
            **policy_kwargs: Any) -> list[dict[str, Any]]:
    """Run `n` episodes per task of every env under `root`, appending trajectories to `out`; returns all of them."""
    out = Path(out)
    existing = read_jsonl(out)
    done = {(r["env"], r["task_id"], r["k"]) for r in existing}
    jobs = []
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        jobs += [(data, t.id, k) for t in data.tasks for k in range(n)]
    columns = (TextColumn("[bold]rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    envs: dict[str, ToolWorldEnv] = {}
    with out.open("a") as sink, Progress(*columns, disable=not progress) as bar:
        job = bar.add_task("rollouts", total=len(jobs))
        for data, task_id, k in jobs:
            bar.advance(job)
            if (data.name, task_id, k) in done:
                continue
            episode_seed = item_seed(seed, "rollouts", f"{data.name}/{task_id}", k) % 2**31
            env = envs.get(data.name)
            if env is None:
                env = envs[data.name] = ToolWorldEnv(data=data, failure_rate=failure_rate, user=user,
                                                     user_model=user_model)
            agent = _policy(policy, data, episode_seed, **policy_kwargs)
            traj = run_episode(env, agent, seed=episode_seed, options={"task_id": task_id})
            record = with_id({"env": data.name, "task_id": task_id, "k": k, "seed": episode_seed, "policy": policy,
                              "failure_rate": failure_rate, "reward": traj.reward,
                              "components": traj.reward_components, "messages": traj.messages,
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


def export_sft(rollouts: str | Path, out: str | Path) -> dict[str, int]:
    """Write the passing trajectories of `rollouts` as SFT JSONL (one example per distinct conversation)."""
    records = read_jsonl(Path(rollouts))
    kept: dict[str, dict[str, Any]] = {}
    for record in sorted(records, key=lambda r: r["id"]):
        if passes(record):
            example = sft_example(record)
            kept.setdefault(canonical_json(example), example)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text("".join(canonical_json(e) + "\n" for e in kept.values()))
    return {"trajectories": len(records), "passed": sum(passes(r) for r in records), "examples": len(kept)}
