"""Collector pauses of one env-server worker holding many sessions, with and without `HeapKeeper`.

    python benchmarks/gc_pauses.py [--env retail] [--sessions 8000] [--seconds 30] [--json]

Each variant runs in a fresh process: an `EnvHost` (what a worker of `envgym serve` holds) makes the sessions,
resets them, then steps them in turn for `--seconds` (an episode that ends is reset), as fast as one thread can.
Every collection is timed through `gc.callbacks`. Printed per variant: full (generation 2) collections and their
longest pause, the longest generation-1 pause, the share of the time spent collecting, and steps/s; then the
ratio of the collector's share of the time without the keeper to the share with it (the default keeper; also run:
the keeper with CPython's young threshold). The numbers depend on the machine's load, which is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
ACTION = "Let me think about it."
# name -> (with a HeapKeeper, its young-generation threshold: None keeps CPython's 700); "keeper" is the default one
VARIANTS: dict[str, tuple[bool, int | None]] = {
    "default": (False, None),
    "keeper_gen0_700": (True, None),
    "keeper": (True, 10_000),
}


def measure(env_id: str, sessions: int, seconds: float, variant: str) -> dict[str, Any]:
    """One variant, in this process."""
    import gc

    from envgym.sandbox.heap import HeapKeeper
    from envgym.sandbox.server_env import EnvHost
    from envgym.sandbox.wire import EnvCreate

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started: list[float] = []

    def timer(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            pauses[info["generation"]].append(time.perf_counter() - started.pop())

    keeper, gen0 = VARIANTS[variant]
    host = EnvHost(env_id, max_sessions=sessions + 1, heap=HeapKeeper(gen0_threshold=gen0) if keeper else None)
    ids = [host.create(EnvCreate()).session_id for _ in range(sessions)]
    for seed, sid in enumerate(ids):
        host.reset(sid, seed=seed, options=None, info_delta=True)
    gc.callbacks.insert(0, timer)
    steps, begin = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - begin) < seconds:
        for sid in ids[steps % len(ids) : steps % len(ids) + 100]:
            body = json.loads(host.step(sid, ACTION))
            steps += 1
            if body["terminated"] or body["truncated"]:
                host.reset(sid, seed=None, options=None, info_delta=True)
    gc.callbacks.remove(timer)
    collecting = sum(sum(p) for p in pauses.values())
    return {
        "variant": variant,
        "full_collections": len(pauses[2]),
        "full_pause_max_ms": round(1000 * max(pauses[2], default=0.0), 1),
        "gen1_collections": len(pauses[1]),
        "gen1_pause_max_ms": round(1000 * max(pauses[1], default=0.0), 1),
        "gen0_pause_max_ms": round(1000 * max(pauses[0], default=0.0), 1),
        "gc_time_share": round(collecting / elapsed, 3),
        "steps_per_s": round(steps / elapsed, 1),
        "tracked_objects": len(gc.get_objects()),
        "frozen_objects": gc.get_freeze_count(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="retail")
    parser.add_argument("--sessions", type=int, default=8000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # one variant, in this process
    args = parser.parse_args()
    env_id = args.env if "/" in args.env else f"envgym/{args.env}-v0"
    if args.variant:
        print(json.dumps(measure(env_id, args.sessions, args.seconds, args.variant)))
        return 0
    load_before = os.getloadavg()
    rows = []
    for variant in VARIANTS:
        argv = [sys.executable, __file__, "--env", args.env, "--sessions", str(args.sessions)]
        argv += ["--seconds", str(args.seconds), "--variant", variant]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
        out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env)
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    before, after = rows[0], rows[-1]
    # The share of time spent collecting, not the longest pause: on a loaded machine a pause's wall time is mostly
    # the process waiting for a core, while the share sums every collection.
    ratio = before["gc_time_share"] / max(after["gc_time_share"], 0.001)
    record = {
        "metric": f"collector's share of the time, {args.sessions} {args.env} sessions, default / keeper",
        "value": round(ratio, 2),
        "goal": "> 1 (shorter with the keeper)",
        "variants": rows,
        "load_before": load_before,
        "load_after": os.getloadavg(),
    }
    if args.json:
        print(json.dumps(record))
        return 0
    table = Table(*rows[0].keys(), title=f"collector pauses: {args.sessions} {args.env} sessions, one worker")
    for row in rows:
        table.add_row(*(str(v) for v in row.values()))
    Console().print(table)
    print(f"collector's share of the time, default / keeper: {ratio:.2f}x; load {load_before} -> {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
