"""Judge filter: an LLM judge (`envgym.rewards.judge`) scores each task's rollouts against the task's rubric items,
and a trajectory is kept only when it passes the verifiable rubric AND its judge score reaches the threshold: the
judge adds a check, it never replaces one. The model goes through the record/replay cache, so a recorded run
replays offline. Writes the kept records and `<root>/_synth/judge.json` (counts; `envgym synth stats` reads it).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envgym.llm import ChatModel
from envgym.registry import env_dirs
from envgym.rewards.judge import RelativeJudge
from envgym.rewards.judge_prompt import rubric_text
from envgym.world.files import load_tasks
from envgym.world.spec import TaskSpec
from synth.rollouts import passes
from synth.store import read_jsonl, write_jsonl

JUDGE_FILE = "judge.json"


def _tasks(root: Path) -> dict[tuple[str, str], TaskSpec]:
    return {(folder.name, t.id): t for folder in env_dirs(root) for t in load_tasks(folder / "tasks.jsonl")}


def judge_scores(judge: RelativeJudge, group: list[dict[str, Any]], task: TaskSpec) -> list[float] | None:
    """One judge score per trajectory of one task's group (None when the judge gave no valid reply).

    A group of identical trajectories gets no relative call; the judge then scores one of them on its own.
    """
    rubric = rubric_text(task.rubric)
    result = judge.score_group([r["messages"] for r in group], group[0]["tools"], rubric)
    if result.status == "identical":
        single = judge.score_group([group[0]["messages"]], group[0]["tools"], rubric)
        return None if single.values is None else single.values * len(group)
    return result.values


def judge_filter(root: str | Path, rollouts: str | Path, out: str | Path, model: ChatModel,
                 threshold: float = 0.5) -> dict[str, Any]:
    """Score, filter and write the kept trajectories; returns (and stores) the counts."""
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold: expected a score in [0, 1], got {threshold}")
    root = Path(root)
    tasks = _tasks(root)
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for record in read_jsonl(Path(rollouts)):
        groups.setdefault((record["env"], record["task_id"]), []).append(record)
    judge = RelativeJudge(model)
    kept: list[dict[str, Any]] = []
    failed = unknown = verified = 0
    for key, group in groups.items():
        task = tasks.get(key)
        if task is None:
            unknown += len(group)
            continue
        scores = judge_scores(judge, group, task)
        if scores is None:
            failed += len(group)
            continue
        for record, score in zip(group, scores, strict=True):
            verified += passes(record)
            if passes(record) and score >= threshold:
                kept.append({**record, "judge": score})
    write_jsonl(Path(out), kept)
    summary = {"trajectories": sum(len(g) for g in groups.values()), "verified": verified, "judge_kept": len(kept),
               "judge_failed": failed, "unknown_task": unknown, "threshold": threshold, "judge_model": model.name,
               "judge_calls": judge.metrics.model_calls}
    folder = root / "_synth"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / JUDGE_FILE).write_text(json.dumps(summary, sort_keys=True, indent=1) + "\n")
    return summary
