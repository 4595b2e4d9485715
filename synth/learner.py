"""Difficulty from a real learner: a policy's success per task, with a Wilson interval, and the curriculum it gives.

A policy (the local model, an OpenAI-compatible server, or a scripted one) is rolled out `samples` times per task
through `synth.rollouts.rollout`, the episode loop `envgym run/eval` use. Success is the verifiable rubric passing
(`synth.rollouts.passes`). The curriculum keeps every measured task and marks it:

- `in_band`: the point estimate lies within `band` of 0.5, where a policy-gradient learner gets the most signal
  (Prompt Curriculum Learning);
- `too_easy`: above the band; the task is kept and a harder version is added (`hardened`), made by appending one
  constraint to its program (LLM-as-a-Tutor; `synth.difficulty.append_constraint`). Appending never contradicts the
  rubric: the parent's rubric, instruction and writes stay as they were, and the hardened task is verified against
  the oracle and the negative controls like any synthesized task (one that fails is not added, and is counted);
- `too_hard`: below the band; kept and marked, since a stronger policy, or a later stage of training, may need it.

The marks go into each task's `meta["curriculum"]`; `<out>/_synth/difficulty.jsonl` holds one estimate per task,
and `<out>/_synth/curriculum.json` the counts, the settings and the time each phase took.
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from envgym.loader import build_environment, load_environment
from envgym.registry import env_dirs
from envgym.world.spec import TaskSpec
from synth.difficulty import append_constraint, write_env_tasks
from synth.rollouts import passes
from synth.seeds import canonical_json
from synth.stages.verify import rejected_by, verify_tasks
from synth.store import read_jsonl, write_jsonl

Z95 = 1.959964
Band = Literal["in_band", "too_easy", "too_hard"]


def wilson_interval(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion: (low, high), in [0, 1]; (0, 1) when nothing was seen.

    centre = (p + z^2 / 2n) / (1 + z^2 / n), half = z sqrt(p (1 - p) / n + z^2 / 4n^2) / (1 + z^2 / n).
    Unlike the normal approximation it stays inside [0, 1] and is not empty at p = 0 or 1, which is all a few
    samples per task ever give.
    """
    if not 0 <= successes <= n:
        raise ValueError(f"successes: expected 0..{n}, got {successes}")
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class SuccessEstimate:
    """One task's measured success under one policy."""

    env: str
    task_id: str
    samples: int
    successes: int
    mean_reward: float

    @property
    def rate(self) -> float:
        return self.successes / self.samples if self.samples else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.successes, self.samples)

    def band(self, width: float) -> Band:
        if abs(self.rate - 0.5) <= width:
            return "in_band"
        return "too_easy" if self.rate > 0.5 else "too_hard"

    def to_json(self) -> dict[str, Any]:
        low, high = self.interval
        return {"env": self.env, "task_id": self.task_id, "samples": self.samples, "successes": self.successes,
                "success": round(self.rate, 4), "wilson_low": round(low, 4), "wilson_high": round(high, 4),
                "mean_reward": round(self.mean_reward, 4)}


def estimate_success(records: list[dict[str, Any]]) -> dict[tuple[str, str], SuccessEstimate]:
    """(env, task id) -> its estimate, from rollout records (`synth.rollouts` lines)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[(record["env"], record["task_id"])].append(record)
    return {key: SuccessEstimate(key[0], key[1], len(group), sum(passes(r) for r in group),
                                 sum(float(r["reward"]) for r in group) / len(group))
            for key, group in sorted(groups.items())}


def _marked(task: TaskSpec, est: SuccessEstimate, band: str, policy: str) -> TaskSpec:
    low, high = est.interval
    mark = {"band": band, "policy": policy, "samples": est.samples, "success": round(est.rate, 4),
            "wilson": [round(low, 4), round(high, 4)]}
    return task.model_copy(update={"meta": {**task.meta, "curriculum": mark}})


def learner_curriculum(root: str | Path, records: list[dict[str, Any]], out: str | Path, *, policy: str,
                       band: float = 0.25, seed: int = 0) -> dict[str, Any]:
    """Write env folders under `out` with every measured task of `root` marked, plus the hardened ones; returns
    the counts. Tasks with no rollout (beyond a `max_tasks` limit) are not part of the curriculum."""
    if not 0.0 <= band <= 0.5:
        raise ValueError(f"band: expected a half-width in [0, 0.5], got {band}")
    estimates = estimate_success(records)
    out = Path(out)
    rows: list[dict[str, Any]] = []
    counts = {"in_band": 0, "too_easy": 0, "too_hard": 0, "hardened": 0, "hardening_rejected": 0,
              "no_constraint_fits": 0}
    for folder in env_dirs(root):
        data = load_environment(str(folder.resolve()))
        keep: list[TaskSpec] = []
        hardened: dict[str, TaskSpec] = {}
        env_rows: dict[str, dict[str, Any]] = {}
        for task in data.tasks:
            est = estimates.get((data.name, task.id))
            if est is None:
                continue
            mark = est.band(band)
            counts[mark] += 1
            keep.append(_marked(task, est, mark, policy))
            if mark == "too_easy":
                harder = append_constraint(data, task, seed)
                if harder is None:
                    counts["no_constraint_fits"] += 1
                else:
                    hardened[task.id] = _marked(harder, est, "hardened", policy)
            env_rows[task.id] = {**est.to_json(), "band": mark}
        scores = verify_tasks(build_environment(data.world, list(hardened.values()))) if hardened else {}
        for parent_id, harder in hardened.items():
            why = rejected_by(scores[harder.id])
            env_rows[parent_id]["hardened"] = {"id": harder.id, "rejected_by": why}
            counts["hardening_rejected" if why else "hardened"] += 1
            if not why:
                keep.append(harder)
        rows += env_rows.values()
        if keep:
            write_env_tasks(folder, out / folder.name, keep)
    write_jsonl(out / "_synth" / "difficulty.jsonl", sorted(rows, key=canonical_json))
    return counts


def measure_and_build(root: str | Path, out: str | Path, *, policy: str, samples: int = 4, seed: int = 0,
                      band: float = 0.25, max_tasks: int | None = None, max_steps: int | None = None,
                      failure_rate: float = 0.0, advance: Any = None, **policy_kwargs: Any) -> dict[str, Any]:
    """Roll `policy` out `samples` times per task (resumable, `<out>/_synth/rollouts.jsonl`), then build the
    curriculum; returns the counts, the settings and the seconds each phase took (also `_synth/curriculum.json`)."""
    from synth.rollouts import rollout

    if samples < 1:
        raise ValueError(f"samples: expected at least 1 rollout per task, got {samples}")
    out = Path(out)
    (out / "_synth").mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    start = time.perf_counter()
    records = rollout(root, out / "_synth" / "rollouts.jsonl", policy=policy, n=samples, seed=seed,
                      failure_rate=failure_rate, advance=advance, max_tasks=max_tasks, max_steps=max_steps,
                      **policy_kwargs)
    rolled = time.perf_counter()
    counts = learner_curriculum(root, records, out, policy=policy, band=band, seed=seed)
    summary = {"policy": policy, "policy_options": policy_kwargs, "samples": samples, "seed": seed, "band": band,
               "max_tasks": max_tasks, "max_steps": max_steps, "failure_rate": failure_rate,
               "tasks": len(estimate_success(records)), "rollouts": len(records),
               "passed": sum(passes(r) for r in records), **counts,
               "rollout_s": round(rolled - start, 1), "curriculum_s": round(time.perf_counter() - rolled, 1),
               "load_avg_before": [round(x, 2) for x in load_before],
               "load_avg_after": [round(x, 2) for x in os.getloadavg()]}
    (out / "_synth" / "curriculum.json").write_text(canonical_json(summary) + "\n")
    (out / "_synth" / "curriculum.md").write_text(curriculum_markdown(summary, read_jsonl(out / "_synth" /
                                                                                          "difficulty.jsonl")))
    return summary


def curriculum_markdown(summary: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """The run's settings, time and counts, and one table row per task (`_synth/curriculum.md`)."""
    lines = [f"# Curriculum from {summary['policy']}", "",
             f"{summary['tasks']} tasks, {summary['samples']} samples each ({summary['rollouts']} rollouts, "
             f"{summary['passed']} passed); rollouts {summary['rollout_s']} s, curriculum {summary['curriculum_s']} s; "
             f"load average {summary['load_avg_before']} before, {summary['load_avg_after']} after.", "",
             "| band | tasks |", "|---|---|"]
    lines += [f"| {k} | {summary[k]} |" for k in ("in_band", "too_easy", "too_hard", "hardened",
                                                 "hardening_rejected", "no_constraint_fits")]
    lines += ["", "| env | task | successes / samples | success | Wilson 95% | mean reward | band | hardened |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        hardened = r.get("hardened") or {}
        mark = hardened.get("id", "") + (f" (rejected: {', '.join(hardened['rejected_by'])})"
                                         if hardened.get("rejected_by") else "")
        lines.append(f"| {r['env']} | {r['task_id']} | {r['successes']} / {r['samples']} | {r['success']} | "
                     f"[{r['wilson_low']}, {r['wilson_high']}] | {r['mean_reward']} | {r['band']} | {mark} |")
    return "\n".join(lines) + "\n"
