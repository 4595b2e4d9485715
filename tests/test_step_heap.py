"""What a step leaves for CPython's cycle collector to watch.

An env keeps its episode (messages, tool results, the tool-call log) until reset, so every container it keeps per
step adds to the count that triggers collections, and the full ones walk the whole heap: in benchmarks/env_step.py
they were a quarter of a retail lookup step. These tests count the objects, not the time.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import envgym  # noqa: F401  (registers the environments)
from envgym.world.tools import ResultLog, ToolErrorKind, ToolResult

REPO_ROOT = Path(__file__).resolve().parents[1]
LOOKUP = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>'


def kept_per_step(env: gym.Env, action: str, steps: int) -> dict[str, int]:
    """The tracked objects `steps` steps leave behind, by type name (the collector's own count, garbage removed)."""
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(steps):
            env.step(action)
    finally:
        if enabled:
            gc.enable()
    gc.collect()  # drops the step's garbage and stops watching tuples of plain values, as a collection does
    kept: dict[str, int] = {}
    for obj in gc.get_objects():
        if id(obj) not in before:
            kept[type(obj).__name__] = kept.get(type(obj).__name__, 0) + 1
    return kept


def test_a_lookup_step_keeps_four_containers_for_the_collector() -> None:
    # Kept by the episode and unavoidable: the assistant message (a dict holding the `tool_calls` list holding one
    # call dict) and the result's copy of the order (a dict holding its `items` list). A ToolResult object per
    # call and a tool-call log row holding the arguments dict were two more, on every step.
    env = gym.make("envgym/retail-v0", max_steps=10**6).unwrapped
    env.reset(seed=0)
    env.step(LOOKUP)  # first-call set-up (caches, lazily built state) is not per step
    kept = kept_per_step(env, LOOKUP, 50)
    assert sum(kept.values()) <= 4 * 50 + 5, kept
    assert "ToolResult" not in kept and "tuple" not in kept, kept
    assert len(env.tool_results) == 51 and len(env.calls.records) == 51


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
    path = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    child_env = {**os.environ, "PYTHONPATH": path}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=child_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout
