"""Steps per second of ToolWorldEnv.step for a lookup tool call, next to the irreducible work in the same run.

Baseline: parse the same JSON call, call a plain function over a dict, json.dumps the result. Goal: the env
within 3x of the baseline. Second line: the guard's per-step overhead on the workspace (guard on vs off over the
same episode of an untrusted read, a trusted lookup and a judged send), goal under 25%. `env_collector_share`: the
part of the env's CPU time spent in the cycle collector.
Run: python benchmarks/env_step.py [--seconds S]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import time
from collections.abc import Callable

import gymnasium as gym

import envgym  # noqa: F401  (registers the environments)
from envgym.env import ToolWorldEnv

CALL_TEXT = '<tool_call>{"name": "get_order_details", "arguments": {"order_id": "#W0001"}}</tool_call>'
CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


def window(fn: Callable[[], object], seconds: float) -> float:
    """Calls per CPU second of `fn` over one window of CPU time: on a shared machine wall-clock windows mostly
    measure the neighbours (at load 4 on 2 cores the wall-clock ratio swung between 3.7 and 5.3 run to run)."""
    n, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < seconds:
        for _ in range(100):
            fn()
        n += 100
    return n / elapsed


def rates(a: Callable[[], object], b: Callable[[], object], seconds: float, rounds: int = 6) -> tuple[float, float]:
    """Best rate of each over interleaved windows: load on a shared machine only slows things down (cache
    misses, frequency), and interleaving exposes both to the same load."""
    best_a = best_b = 0.0
    for _ in range(rounds):
        best_a = max(best_a, window(a, seconds / rounds / 2))
        best_b = max(best_b, window(b, seconds / rounds / 2))
    return best_a, best_b


def collector_share(fn: Callable[[], object], seconds: float) -> float:
    """The share of `fn`'s CPU time spent in CPython's cycle collector (its collections, timed by gc.callbacks):
    what an episode keeps per step is traversed by every later collection, the full ones walking the whole heap."""
    spent, started = [0.0], [0.0]

    def timer(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            spent[0] += time.process_time() - started[0]

    gc.callbacks.append(timer)
    try:
        start = time.process_time()
        window(fn, seconds)
        return spent[0] / (time.process_time() - start)
    finally:
        gc.callbacks.remove(timer)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=6.0)
    args = parser.parse_args()

    env = gym.make("envgym/retail-v0", max_steps=10**9).unwrapped
    env.reset(seed=0)
    bare = gym.make("envgym/retail-v0", max_steps=10**9, guard=False, tool_rewards=False).unwrapped
    bare.reset(seed=0)
    orders = {k: dict(v) for k, v in env.state.tables["orders"].items()}

    def get_order(order_id: str) -> dict:
        return orders[order_id]

    def baseline() -> str:
        call = json.loads(CALL_RE.search(CALL_TEXT).group(1))
        return json.dumps(get_order(**call["arguments"]))

    def stepper(e: ToolWorldEnv) -> Callable[[], None]:
        def step() -> None:
            e.step(CALL_TEXT)
            if len(e.messages) > 2000:  # keep the conversation from growing without bound
                e.reset(seed=0)

        return step

    base, steps = rates(baseline, stepper(env), args.seconds)
    base2, bare_steps = rates(baseline, stepper(bare), args.seconds)
    share = collector_share(stepper(env), args.seconds / 4)
    print(json.dumps({
        "baseline_calls_per_s": round(base), "env_steps_per_s": round(steps),
        "ratio_baseline_over_env": round(base / steps, 2),
        "bare_env_steps_per_s": round(bare_steps), "ratio_baseline_over_bare_env": round(base2 / bare_steps, 2),
        "env_collector_share": round(share, 3),
        "note": "env: defaults (guard and per-tool-call rewards on); bare: guard=False, tool_rewards=False; CPU time",
        "goal": "<= 3.0",
    }))


GUARD_EPISODE = [
    ("search_emails", {"query": "Coffee machine broken"}),  # untrusted: recorded, escaped, delimited
    ("search_contacts", {"query": "Jennifer Hines"}),  # trusted: recorded
    ("send_email", {"recipients": ["jennifer.hines@bluesparrowtech.com"], "subject": "Coffee machine",  # judged
                    "body": "The coffee machine on floor 3 is broken; facilities will fix it on Monday."}),
]


def guard_overhead() -> dict[str, object]:
    """CPU time per step on the workspace with the guard on and off, over the same three-call episode."""
    from envgym.protocol import format_tool_call

    calls = [format_tool_call(name, args) for name, args in GUARD_EPISODE]

    def stepper(guard: bool) -> Callable[[], None]:
        env = gym.make("envgym/workspace-v0", max_steps=10**9, guard=guard, tool_rewards=False).unwrapped
        env.reset(seed=0, options={"task_id": "forward_E0012"})
        turn = [0]

        def step() -> None:
            i = turn[0] % len(calls)
            if i == 0:
                env.reset(seed=0, options={"task_id": "forward_E0012"})
            env.step(calls[i])
            turn[0] += 1

        return step

    on, off = stepper(True), stepper(False)
    # CPU time, not wall time: the overhead is work the guard adds, and on a shared machine wall-clock windows
    # mostly measure the neighbours. Best of interleaved rounds, as in `rates`.
    best_on = best_off = float("inf")
    for _ in range(10):
        for fn, which in ((on, "on"), (off, "off")):
            start = time.process_time()
            for _ in range(300):
                fn()
            per_step = (time.process_time() - start) / 300
            if which == "on":
                best_on = min(best_on, per_step)
            else:
                best_off = min(best_off, per_step)
    return {"guard_on_us_per_step": round(best_on * 1e6), "guard_off_us_per_step": round(best_off * 1e6),
            "guard_overhead": round(best_on / best_off - 1, 3), "goal": "< 0.25",
            "note": "workspace, forward_E0012: search_emails, search_contacts, send_email; reset every 3 steps; CPU time"}


if __name__ == "__main__":
    main()
    print(json.dumps(guard_overhead()))
