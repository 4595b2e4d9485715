"""experiments/kind_drift.py: per step and task kind, successes and episodes that called another kind's tool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.loader import read_environment
from synth.pipeline import SynthConfig, run_pipeline
from synth.subsets import kind_subset

SCRIPT = Path(__file__).resolve().parents[2] / "experiments" / "kind_drift.py"


@pytest.mark.slow
def test_a_lookup_calling_the_aggregates_tool_is_counted(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_pipeline(SynthConfig(seed=1, domains=1, tasks_per_env=60, mechanism_share=0.0), tmp_path / "synth")
    (source,) = [p for p in (tmp_path / "synth").iterdir() if (p / "world.yaml").exists()]
    folder, _ = kind_subset(source, run / "train" / "suite", kinds=("lookup", "aggregate"), heldout=4, seed=0)
    _, tasks = read_environment(folder)
    lookup = next(t for t in tasks if t.meta["kind"] == "lookup")
    aggregate = next(t for t in tasks if t.meta["kind"] == "aggregate")
    used = {kind: {c.name for t in tasks if t.meta["kind"] == kind for c in t.solution} for kind in ("lookup", "aggregate")}
    theirs = sorted(used["aggregate"] - used["lookup"])[0]  # a tool only aggregates need

    def episode(step: int, task: object, tools: list[str], reward: float) -> dict[str, object]:
        messages = [{"role": "user", "content": "hi"}] + [{"role": "tool", "name": n, "content": "{}"} for n in tools]
        return {"step": step, "task_id": task.id, "messages": messages, "reward": reward}  # type: ignore[attr-defined]

    own = [c.name for c in lookup.solution]
    rows = [episode(0, lookup, own, 1.0), episode(0, lookup, [own[0], theirs], 0.0),
            episode(0, aggregate, [c.name for c in aggregate.solution], 1.0), episode(1, lookup, [theirs], 0.0)]
    (run / "rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    held = tasks[-4:]  # the held-out tail, as the trainer splits it; (b) solves every one, (c) only the first
    report = {"recipe": {"env": {"heldout": 4}}, "transfer": [],
              "per_task": {"train_domain": {"b": [True] * 4, "c": [True, False, False, False]}}}
    (run / "report.json").write_text(json.dumps(report))
    out = subprocess.run([sys.executable, str(SCRIPT), str(run)], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert "aggregate: successes / episodes" in lines[2] and lines[2].index("aggregate") < lines[2].index("lookup")
    assert lines[4] == "| 0 | 1 / 1 (0) | 1 / 2 (1) |"
    assert lines[5] == "| 1 | - | 0 / 1 (1) |"
    expected = {}
    for i, task in enumerate(held):
        b, c, n = expected.get(task.meta["kind"], (0, 0, 0))
        expected[task.meta["kind"]] = (b + 1, c + (i == 0), n + 1)
    cells = [f"| train domain | {k} | {b} → {c} of {n} |" for k, (b, c, n) in sorted(expected.items())]
    assert [line for line in lines if line.startswith("| train domain |")] == cells
