"""`envgym synth stats`: counts, diversity and verification outcomes of a folder of synthesized environments.

Reads world.yaml and tasks.jsonl only (no world is generated), so it is quick on thousands of environments.
Diversity: distinct tool signatures with names masked (synth.mutations.signature), their growth with the number of
domains, distinct task program shapes, and the near-duplicate rate of instructions once names, ids, emails, dates
and numbers are masked.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from envgym.registry import env_dirs
from envgym.world.files import load_tasks, load_world
from synth.model import ToolRecord
from synth.mutations import signature
from synth.phrasing import mask
from synth.stages.naming import name_counts


def near_duplicate_rate(texts: list[str]) -> float:
    """Share of texts whose masked form equals an earlier text's."""
    return round(1 - len({mask(t) for t in texts}) / len(texts), 4) if texts else 0.0


def _rejections(root: Path) -> dict[str, int]:
    path = root / "_synth" / "tasks.jsonl"
    counts: Counter[str] = Counter()
    if path.exists():
        for line in path.read_text().splitlines():
            record = json.loads(line)
            counts.update(record.get("rejected_by", []))
            counts["sampled"] += 1
    return dict(sorted(counts.items()))


def _tool_names(root: Path) -> dict[str, Any] | None:
    """How the model's tool names fared in the run that made `root` (None for a procedural run)."""
    path = root / "_synth" / "tools.jsonl"
    if not path.exists():
        return None
    return name_counts([ToolRecord.model_validate({k: v for k, v in json.loads(line).items() if k not in ("id", "unit")})
                        for line in path.read_text().splitlines()])


def curve_marks(n: int) -> list[int]:
    """Where the signature curve is sampled: 10, 20, 50, 100, then every 200 domains, and at the end."""
    return sorted({m for m in (10, 20, 50, 100, *range(200, n + 1, 200)) if m <= n} | {n})


def _curve(signatures: list[tuple[int, set[str]]]) -> dict[str, int]:
    """Distinct signatures among the first n domains, for growing n."""
    ordered = sorted(signatures, key=lambda x: x[0])
    marks = set(curve_marks(len(ordered)))
    out, seen = {}, set()
    for i, (_, sigs) in enumerate(ordered, start=1):
        seen |= sigs
        if i in marks:
            out[str(i)] = len(seen)
    return out


def judge_counts(root: str | Path) -> dict[str, Any] | None:
    """What the judge filter (`envgym synth judge`) last did on `root`: trajectories judged, verified by the rubric,
    kept by the judge, the threshold and the judge model; None if it has not run."""
    path = Path(root) / "_synth" / "judge.json"
    if not path.exists():
        return None
    stored = json.loads(path.read_text())
    return {"trajectories": stored["trajectories"], "verified": stored["verified"], "kept": stored["judge_kept"],
            "judge_failed": stored["judge_failed"], "threshold": stored["threshold"], "model": stored["judge_model"]}


def dependent_calls(program: dict[str, Any]) -> int:
    """Calls of a task program that take an argument from an earlier call's result (a saved variable)."""
    def uses_var(node: Any) -> bool:
        if isinstance(node, dict):
            return node.get("src") == "var" or any(uses_var(v) for v in node.values())
        return isinstance(node, list) and any(uses_var(v) for v in node)

    def walk(steps: list[dict[str, Any]]) -> int:
        n = 0
        for step in steps:
            if "tool" in step and uses_var(step.get("args", {})):  # a call (dumped without its default kind)
                n += 1
            n += walk(step.get("then", [])) + walk(step.get("otherwise", [])) + walk(step.get("body", []))
        return n
    return walk(program.get("steps", []))


def _median(values: list[int]) -> float:
    return float(statistics.median(values)) if values else 0.0


def collect_stats(root: str | Path) -> dict[str, Any]:
    """Everything `envgym synth stats --json` prints."""
    root = Path(root)
    envs = env_dirs(root)
    categories: Counter[str] = Counter()
    operators: Counter[str] = Counter()
    mutations: Counter[str] = Counter()
    structural: Counter[str] = Counter()
    kinds: Counter[str] = Counter()
    lengths: Counter[int] = Counter()
    names: set[str] = set()
    shapes: set[str] = set()
    per_domain: list[tuple[int, set[str]]] = []
    instructions: list[str] = []
    tools = writes = code = multi = 0
    mechanisms: Counter[str] = Counter()
    per_world: list[int] = []
    dependent: list[int] = []
    sources: Counter[str] = Counter()
    for folder in envs:
        world = load_world(folder / "world.yaml")
        tasks = load_tasks(folder / "tasks.jsonl")
        meta = world.meta.get("synth", {})
        used = {t.mechanism.use for t in world.tools if t.mechanism is not None}
        mechanisms.update({u.mechanism for u in world.mechanisms if u.id in used})
        per_world.append(len(used))
        code += sum(t.mechanism is not None or t.python is not None for t in world.tools)
        # Several tables, or several records of one table (a bulk change), in one call.
        multi += sum(len(t.writes or []) >= 2 or (t.effect is not None and t.effect.op == "update_many")
                     for t in world.tools)
        dependent += [dependent_calls(t.meta.get("program", {})) for t in tasks]
        categories[meta.get("category", "unknown")] += 1
        structural.update(meta.get("operators", []))
        tools += len(world.tools)
        writes += sum(not t.read_only for t in world.tools)
        names.update(t.name for t in world.tools)
        per_domain.append((int(meta.get("order", len(per_domain))), {signature(t) for t in world.tools}))
        for info in meta.get("tools", {}).values():
            operators[info["operator"]] += 1
            mutations.update(info.get("mutations", []))
        sources["mcp" if "mcp" in world.meta else "procedural"] += len(tasks)
        for task in tasks:
            kinds[str(task.meta.get("kind", "task"))] += 1
            shapes.add(str(task.meta.get("shape", task.id)))
            lengths[len(task.solution)] += 1
            instructions.append(task.instruction)
    total = sum(lengths.values())
    curve = _curve(per_domain)
    judge = judge_counts(root)
    return {
        "environments": len(envs), "categories": len(categories), "tools": tools, "write_tools": writes,
        "distinct_tool_names": len(names), "distinct_tool_signatures": max(curve.values(), default=0),
        "signature_curve": curve, "tasks": total, "task_program_shapes": len(shapes),
        "instruction_near_duplicate_rate": near_duplicate_rate(instructions),
        "tools_by_operator": dict(sorted(operators.items())), "tools_by_mutation": dict(sorted(mutations.items())),
        "domains_by_structural_operator": dict(sorted(structural.items())),
        "tasks_by_kind": dict(sorted(kinds.items())),
        "tasks_by_source": {"procedural": sources["procedural"], "mcp": sources["mcp"]},
        "judge_kept": None if judge is None else judge["kept"], "judge": judge, "tasks_rejected_by": _rejections(root),
        "tool_names": _tool_names(root),
        "tool_calls_per_task": {str(k): v for k, v in sorted(lengths.items())},
        "mean_tool_calls": round(sum(k * v for k, v in lengths.items()) / total, 3) if total else 0.0,
        "environments_by_category": dict(sorted(categories.items())),
        "mechanisms_in_use": len(mechanisms), "mechanisms_per_world": round(statistics.fmean(per_world), 2)
        if per_world else 0.0, "worlds_by_mechanism": dict(sorted(mechanisms.items())),
        "tools_that_are_code": code, "tools_that_are_code_share": round(code / tools, 4) if tools else 0.0,
        "tools_writing_several_records": multi, "tools_writing_several_records_share": round(multi / tools, 4)
        if tools else 0.0,
        "dependent_calls_per_task_median": _median(dependent),
        "dependent_calls_per_task": {str(k): v for k, v in sorted(Counter(dependent).items())},
        "sentence_skeletons": len({mask(t) for t in instructions}),
    }
