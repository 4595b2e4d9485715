"""`envgym synth stats`: counts and diversity of a folder of synthesized environments."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from envgym.loader import load_environment
from envgym.registry import env_dirs


def collect_stats(root: str | Path) -> dict[str, Any]:
    """Environments, categories, domains, tools (total, distinct names, reads/writes), tasks by kind, and the
    distribution of reference-solution lengths (tool calls per task)."""
    envs = env_dirs(root)
    categories: Counter[str] = Counter()
    domains: set[str] = set()
    tool_names: set[str] = set()
    tools = writes = tasks = 0
    kinds: Counter[str] = Counter()
    lengths: Counter[int] = Counter()
    for folder in envs:
        data = load_environment(str(folder.resolve()))
        meta = data.world.meta.get("synth", {})
        categories[meta.get("category", "unknown")] += 1
        domains.add(meta.get("domain", data.name))
        tools += len(data.world.tools)
        writes += sum(not t.read_only for t in data.world.tools)
        tool_names.update(t.name for t in data.world.tools)
        tasks += len(data.tasks)
        for task in data.tasks:
            kinds[str(task.meta.get("kind", task.tags[0] if task.tags else "task"))] += 1
            lengths[len(task.solution)] += 1
    total = sum(lengths.values())
    return {
        "environments": len(envs), "categories": len(categories), "domains": len(domains),
        "tools": tools, "write_tools": writes, "distinct_tool_names": len(tool_names), "tasks": tasks,
        "tasks_by_kind": dict(sorted(kinds.items())),
        "tool_calls_per_task": {str(k): v for k, v in sorted(lengths.items())},
        "mean_tool_calls": round(sum(k * v for k, v in lengths.items()) / total, 3) if total else 0.0,
        "environments_by_category": dict(sorted(categories.items())),
    }
