"""Difficulty: Prompt Curriculum Learning selection and LLM-as-a-Tutor append-only constraints.

From recorded rollouts, each task gets a success rate. Tasks near 0.5 (|p - 0.5| <= band) are selected: they
give the most learning signal. Tasks whose rollouts no longer differ in reward and all succeed are saturated: one
more change is appended to the task's program (on another of the user's records), the program is solved again
for the new reference solution, and the new task verified against the negative controls. Constraints are only ever appended,
so a task's difficulty only rises. Tasks every rollout fails are dropped (no policy signal).
"""

from __future__ import annotations

import shutil
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from envgym.loader import EnvironmentData, build_environment, load_environment
from envgym.registry import env_dirs
from envgym.world.files import dump_tasks
from envgym.world.spec import TaskSpec, ToolSpec
from synth.model import DomainModel
from synth.program import Program, ProgramError
from synth.seeds import canonical_json, content_id, item_rng
from synth.segments import Builder, Unfit, seg_change
from synth.stages.tasks import fact_names, solve
from synth.stages.verify import rejected_by, verify_tasks
from synth.store import read_jsonl, write_jsonl


def success_rates(rollouts: list[dict[str, Any]]) -> dict[tuple[str, str], list[float]]:
    """(env, task id) -> rewards of its rollouts."""
    rewards: dict[tuple[str, str], list[float]] = defaultdict(list)
    for r in sorted(rollouts, key=lambda r: (r["env"], r["task_id"], r["k"])):
        rewards[(r["env"], r["task_id"])].append(float(r["reward"]))
    return dict(rewards)


def append_constraint(data: EnvironmentData, task: TaskSpec, seed: int) -> TaskSpec | None:
    """The task with one more change appended to its program (on another record the user owns, valid after the
    task's own writes), re-solved from the initial world; None if no change fits. Every change the task's own
    solution makes is still made, the same way, by the new one: the constraint adds, it never contradicts."""
    meta = data.world.meta["synth"]
    domain = DomainModel.model_validate(meta["model"])
    tools: dict[str, list[tuple[ToolSpec, str, str]]] = {}
    for tool in data.world.tools:
        info = meta["tools"][tool.name]
        tools.setdefault(info["operator"], []).append((tool, info["entity"], info["operator"]))
    program = Program.model_validate(task.meta["program"])
    target = data.target_state(task)
    parent_changes = data.initial.diff(target)
    acct = domain.entity(domain.account)
    me = next(r for r in target.tables[acct.plural].values()
              if all(str(r.get(f)) == task.user_known.get(f) for f in domain.auth))
    for attempt in range(8):
        rng = item_rng(seed, "difficulty", task.id, attempt + 10 * len(task.meta.get("constraints", [])))
        b = Builder(domain, tools, target, rng, me=me, steps=list(program.steps[:-1]), known=dict(task.user_known),
                    n=100 + 10 * len(task.meta.get("constraints", [])))
        try:
            seg_change(b)
            extended = Program(steps=[*b.steps, program.steps[-1]])
            end = data.initial.copy()
            calls, _ = solve(extended, data.executor, end, b.known)
        except (Unfit, ProgramError):
            continue
        if len(calls) <= len(task.solution) or data.executor.tools[calls[-1].name].read_only:
            continue
        if end.hash() == target.hash():  # the change sets a value the record already had: nothing is added
            continue
        made = data.initial.diff(end)
        if any(change not in made for change in parent_changes):
            # The change landed on a record the task itself writes (one it creates or changes): it would undo
            # or alter what the task asks for, contradicting the rubric rather than adding to it.
            continue
        text = "Also, " + b.clauses[-1].removeprefix("you have several ") + "."
        request = f"{task.meta.get('request', '')} Also, {b.request[-1]}.".strip()
        constraints = [*task.meta.get("constraints", []), text]
        body = {"parent": task.id, "constraints": constraints, "solution": [c.model_dump(mode="json") for c in calls]}
        return task.model_copy(update={
            "id": f"{task.meta.get('kind', 'task')}_{content_id(body, 12)}", "instruction": f"{task.instruction} {text}",
            "solution": calls, "user_known": b.known, "rubric": [*task.rubric, text],
            "max_steps": (task.max_steps or 0) + 12,
            "meta": {**task.meta, "constraints": constraints, "parent": task.id, "request": request,
                     "fact_names": fact_names(b.known),
                     "wanted_facts": sorted({*task.meta.get("wanted_facts", []), *b.wanted}),
                     "program": extended.model_dump(mode="json", exclude_defaults=True)}})
    return None


def write_env_tasks(folder: Path, target: Path, tasks: list[TaskSpec]) -> None:
    """An env folder at `target`: the world, policy and README of `folder`, with `tasks` (sorted by id)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in ("world.yaml", "policy.md", "README.md"):
        if (folder / name).exists():
            shutil.copyfile(folder / name, target / name)
    dump_tasks(sorted(tasks, key=lambda t: t.id), target / "tasks.jsonl")


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
        scores = verify_tasks(build_environment(data.world, hardened)) if hardened else {}
        keep = [t for t in keep if t.id not in scores or not rejected_by(scores[t.id])]
        if not keep:
            continue
        write_env_tasks(folder, out / folder.name, keep)
    write_jsonl(out / "_synth" / "difficulty.jsonl", sorted(decisions, key=canonical_json))
    return counts
