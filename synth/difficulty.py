"""Stage 6, difficulty: Prompt Curriculum Learning selection and LLM-as-a-Tutor append-only constraints.

From recorded rollouts, each task gets a success rate. Tasks near 0.5 (|p - 0.5| <= band) are selected: they
give the most learning signal. Tasks whose rollouts no longer differ in reward and all succeed are saturated: one
atomic constraint is appended (a further state change on the task's own entities), the reference solution is
extended, the target state recomputed by replay, and the new task verified. Constraints are only ever appended,
so a task's difficulty only rises. Tasks every rollout fails are dropped (no policy signal).
"""

from __future__ import annotations

import random
import shutil
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from envgym.loader import EnvironmentData, build_environment, load_environment
from envgym.registry import env_dirs
from envgym.world.spec import Assertion, TaskSpec, ToolCall, dump_tasks
from envgym.world.state import WorldState
from envgym.world.tools import ToolExecutor
from synth.seeds import canonical_json, content_id, item_rng
from synth.store import read_jsonl, write_jsonl
from synth.taxonomy import DomainBlueprint
from synth.verify import verify_tasks


def success_rates(rollouts: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(env, task id) -> rewards of its rollouts."""
    rewards: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in sorted(rollouts, key=lambda r: (r["env"], r["task_id"], r["k"])):
        rewards[(r["env"], r["task_id"])].append(float(r["reward"]))
    return dict(rewards)


def _constraints(data: EnvironmentData, task: TaskSpec, state: WorldState,
                 rng: random.Random) -> list[tuple[str, ToolCall, Assertion, dict[str, str]]]:
    """Candidate atomic constraints on the entities the task already touches, valid on its target state."""
    meta = data.world.meta["synth"]
    roles: dict[str, str] = meta["roles"]
    bp = DomainBlueprint.model_validate(meta["blueprint"])
    a, s, r = bp.actor, bp.asset, bp.record
    aid, sid, rid = f"{a.noun}_id", f"{s.noun}_id", f"{r.noun}_id"
    args = [c.arguments for c in task.solution]
    actors = {x[aid] for x in args if aid in x} | {state.tables[r.entity][x[rid]][aid] for x in args
                                                  if rid in x and x[rid] in state.tables[r.entity]}
    assets = sorted({x[sid] for x in args if sid in x} | {
        k for k, v in state.tables[s.entity].items() if any(x.get("query") == v["name"] for x in args)})
    out = []
    for key in assets:
        asset = state.tables[s.entity][key]
        if "set_measure" in roles and asset["status"] != s.states[-1]:
            value = rng.randint(int(s.min), int(s.max))
            out.append((f"Also, the {s.measure.replace('_', ' ')} of {asset['name']} must end at {value} {s.unit}.",
                        ToolCall(name=roles["set_measure"], arguments={sid: key, "value": value}),
                        Assertion(entity=s.entity, key=key, field=s.measure, value=value),
                        {f"{s.noun}_name": asset["name"]}))
        if "set_status" in roles:
            status = rng.choice([x for x in s.states if x != asset["status"]])
            out.append((f"Also, {asset['name']} must end marked as {status.replace('_', ' ')}.",
                        ToolCall(name=roles["set_status"], arguments={sid: key, "status": status}),
                        Assertion(entity=s.entity, key=key, field="status", value=status),
                        {f"{s.noun}_name": asset["name"]}))
    own = sorted(k for k, v in state.tables[r.entity].items() if v[aid] in actors and v["status"] in r.open)
    for key in own:
        if "update_qty" in roles:
            qty = rng.randint(r.qty_min, r.qty_max)
            out.append((f"Also, your {r.noun.replace('_', ' ')} {key} must end with "
                        f"{r.qty.replace('_', ' ')} {qty}.",
                        ToolCall(name=roles["update_qty"], arguments={rid: key, r.qty: qty}),
                        Assertion(entity=r.entity, key=key, field=r.qty, value=qty), {f"other_{rid}": key}))
    return out


def append_constraint(data: EnvironmentData, task: TaskSpec, seed: int) -> TaskSpec | None:
    """The task with one more atomic constraint that changes its target state, or None if none applies."""
    target = data.target_state(task)
    rng = item_rng(seed, "difficulty", task.id, len(task.meta.get("constraints", [])))
    candidates = _constraints(data, task, target, rng)
    rng.shuffle(candidates)
    executor: ToolExecutor = data.executor
    asserted = {(x.entity, x.key, x.field) for x in task.assertions}
    for text, call, assertion, known in candidates:
        if (assertion.entity, assertion.key, assertion.field) in asserted:
            continue  # appending may narrow the goal, never contradict an earlier constraint
        after = target.copy()
        if not executor.execute(after, call.name, call.arguments).ok or after.hash() == target.hash():
            continue
        constraints = [*task.meta.get("constraints", []), text]
        solution = [*task.solution, call]
        body = {"parent": task.id, "constraints": constraints,
                "solution": [c.model_dump(mode="json") for c in solution]}
        return task.model_copy(update={
            "id": f"{task.meta.get('kind', 'task')}_{content_id(body, 12)}",
            "instruction": f"{task.instruction} {text}", "solution": solution,
            "assertions": [*task.assertions, assertion], "user_known": {**task.user_known, **known},
            "rubric": [*task.rubric, text], "meta": {**task.meta, "constraints": constraints, "parent": task.id},
        })
    return None


def curriculum(root: str | Path, rollouts: str | Path, out: str | Path, *, band: float = 0.25,
               seed: int = 0) -> dict[str, int]:
    """Write env folders under `out` holding the selected (PCL) and hardened (Tutor) tasks of `root`."""
    rewards = success_rates(read_jsonl(Path(rollouts)))
    out = Path(out)
    decisions: list[dict[str, Any]] = []
    counts = {"selected": 0, "hardened": 0, "dropped_unsolved": 0, "skipped": 0}
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        keep: list[TaskSpec] = []
        for task in data.tasks:
            got = rewards.get((data.name, task.id), [])
            if not got:
                continue
            rate = statistics.fmean(got)
            action = "skipped"
            if abs(rate - 0.5) <= band:
                keep.append(task)
                action = "selected"
            elif len(got) >= 2 and len(set(got)) == 1:
                if rate == 1.0 and (harder := append_constraint(data, task, seed)) is not None:
                    keep.append(harder)
                    action = "hardened"
                elif rate == 0.0:
                    action = "dropped_unsolved"
            counts[action] += 1
            decisions.append({"env": data.name, "task_id": task.id, "rewards": got, "action": action,
                              "new_id": keep[-1].id if action == "hardened" else None})
        hardened = [t for t in keep if "parent" in t.meta]
        verdicts = verify_tasks(build_environment(data.world, hardened)) if hardened else {}
        keep = [t for t in keep if t.id not in verdicts or verdicts[t.id].keep]
        if not keep:
            continue
        target = out / folder.name
        target.mkdir(parents=True, exist_ok=True)
        for name in ("world.yaml", "policy.md", "README.md"):
            if (folder / name).exists():
                shutil.copyfile(folder / name, target / name)
        dump_tasks(sorted(keep, key=lambda t: t.id), target / "tasks.jsonl")
    write_jsonl(out / "_synth" / "difficulty.jsonl", sorted(decisions, key=canonical_json))
    return counts
