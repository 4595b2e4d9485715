"""What a step leaves for CPython's cycle collector to watch.

An env keeps its episode (messages, tool results, the tool-call log) until reset, so every container it keeps per
step adds to the count that triggers collections, and the full ones walk the whole heap: in benchmarks/env_step.py
they were a quarter of a retail lookup step. These tests count the objects, not the time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from envgym.world.tools import ResultLog, ToolErrorKind, ToolResult

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOKUP = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>'


# Counted in a fresh interpreter: gc.get_objects() sees every thread's objects, and a thread an earlier test left
# running (a server, a progress bar) allocates during the window (CI once saw its lock, bound method and tuples).
KEPT_PER_STEP = """
import gc, json, sys
import gymnasium as gym
import envgym

action, steps = sys.argv[1], int(sys.argv[2])
env = gym.make("envgym/retail-v0", max_steps=10**6).unwrapped
env.reset(seed=0)
env.step(action)  # first-call set-up (caches, lazily built state) is not per step
gc.collect()
before = {id(o) for o in gc.get_objects()}
gc.disable()
for _ in range(steps):
    env.step(action)
gc.enable()
gc.collect()  # drops the steps' garbage and stops watching tuples of plain values, as a collection does
kept = {}
for obj in gc.get_objects():
    if id(obj) not in before:
        kept[type(obj).__name__] = kept.get(type(obj).__name__, 0) + 1
print(json.dumps({"kept": kept, "results": len(env.tool_results), "records": len(env.calls.records)}))
"""


def run_python(code: str, *args: str) -> str:
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    child_env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=300,
                          env=child_env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_lookup_step_keeps_four_containers_for_the_collector() -> None:
    # Kept by the episode and unavoidable: the assistant message (a dict holding the `tool_calls` list holding one
    # call dict) and the result's copy of the order (a dict holding its `items` list). A ToolResult object per
    # call and a tool-call log row holding the arguments dict were two more, on every step.
    out = json.loads(run_python(KEPT_PER_STEP, LOOKUP, "50"))
    kept = out["kept"]
    assert sum(kept.values()) <= 4 * 50 + 5, kept
    assert "ToolResult" not in kept and "tuple" not in kept, kept
    assert out["results"] == 51 and out["records"] == 51


def test_the_result_log_reads_back_what_was_appended() -> None:
    results = [ToolResult(True, {"a": [1]}), ToolResult(False, error="no order", error_kind=ToolErrorKind.NOT_FOUND),
               ToolResult(True, "x")]
    log = ResultLog()
    for r in results:
        log.append(r)
    assert len(log) == 3
    assert list(log) == results
    assert log[0] == results[0] and log[-1] == results[2] and log[-2].error_kind == "not_found"
    assert log[1:] == results[1:] and log[::-1] == results[::-1]
    assert log[0].value is results[0].value  # the value itself, not a copy
    with pytest.raises(IndexError):
        log[3]


def test_an_in_process_env_imports_no_module_it_does_not_use() -> None:
    # The registry's entry point chooses between an in-process env and a sandboxed one, envgym exports the remote
    # env, and tool arguments are validated by envgym's own compiled checks unless a schema needs the jsonschema
    # library. All three were imported with their modules: the sandbox client brings httpx (which imports click,
    # rich and pygments), the remote env asyncio (with ssl), and jsonschema its referencing machinery. Every full
    # collection walks them: 65k tracked objects after making retail-v0, 47k without them (the collector's share of
    # a lookup step fell from ~24% to ~17%). A fresh interpreter, since this one has imported them already.
    code = (
        "import sys, gymnasium as gym, envgym\n"
        "env = gym.make('envgym/retail-v0'); env.reset(seed=0)\n"
        "mods = ('httpx', 'click', 'rich', 'pygments', 'asyncio', 'jsonschema', 'envgym.sandbox.client',"
        " 'envgym.remote')\n"
        "print(sorted(m for m in mods if m in sys.modules))"
    )
    assert run_python(code).strip() == "[]"
