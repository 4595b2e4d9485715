"""Load test: 1,000 concurrent env sessions on `envgym serve --workers N`, driven from several client processes.

    python benchmarks/load.py [--sessions 1000] [--workers 2] [--clients 4] [--threads 16] [--steps 5] [--env calculator]

Every session is opened first (all of them held at once), then each client thread steps its share of sessions in
turn. Prints steps/s, p50/p99 step latency, session creates/s, and each worker's resident memory idle, with the
sessions open, and with every session in a live episode (memory per session). These per-process figures feed docs/scale.md. A load test, not a
unit test: the numbers depend on the machine and its load, which is printed with them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from serving import drive, latency_summary, rss_mb, start_server  # benchmarks/serving.py

# This checkout's envgym in the client processes too (spawned children inherit sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def client(
    url: str, token_file: str, sessions: int, threads: int, steps: int, ready: Any, go: Event, release: Event
) -> None:
    """One client process: open `sessions` RemoteEnvs, report, wait for the start, drive them, send latencies,
    and keep the sessions (each with a live episode) open until released."""
    from envgym.remote import RemoteEnv

    started = time.perf_counter()
    envs = [RemoteEnv(url, token_file=token_file, timeout_s=300) for _ in range(sessions)]
    created = time.perf_counter() - started
    groups = [envs[i::threads] for i in range(threads)]
    ready.put({"created_s": created})
    go.wait()
    latencies: list[float] = []
    result = drive([g for g in groups if g], steps, latencies=latencies)
    ready.put({"result": result, "latencies": latencies})
    release.wait()
    for env in envs:
        env.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--workers", type=int, default=2, help="env-server worker processes")
    parser.add_argument("--clients", type=int, default=4, help="client processes sharing the sessions")
    parser.add_argument("--threads", type=int, default=16, help="threads per client process")
    parser.add_argument("--steps", type=int, default=5, help="steps per session")
    parser.add_argument("--env", default="envgym/calculator-v0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    load_before = os.getloadavg()
    server = start_server(args.env, args.workers, max_sessions=2 * args.sessions)
    ctx = mp.get_context("spawn")
    results: dict[str, Any] = {"env": args.env, "sessions": args.sessions, "workers": args.workers}
    try:
        workers = server.worker_pids()
        rss_idle = [rss_mb(pid) for pid in workers]
        ready, go, release = ctx.Queue(), ctx.Event(), ctx.Event()
        share = [args.sessions // args.clients + (i < args.sessions % args.clients) for i in range(args.clients)]
        procs = [
            ctx.Process(
                target=client,
                args=(server.url, server.token_file, n, args.threads, args.steps, ready, go, release),
            )
            for n in share
        ]
        with Progress(disable=args.json) as progress:
            task = progress.add_task(f"opening {args.sessions} sessions", total=args.clients)
            started = time.perf_counter()
            for proc in procs:
                proc.start()
            for _ in procs:
                ready.get()
                progress.advance(task)
            open_s = time.perf_counter() - started
            rss_open = [rss_mb(pid) for pid in workers]
            task = progress.add_task(f"stepping, {args.steps} steps per session", total=args.clients)
            started = time.perf_counter()
            go.set()
            latencies: list[float] = []
            for _ in procs:
                latencies += ready.get()["latencies"]
                progress.advance(task)
            elapsed = time.perf_counter() - started
            rss_live = [rss_mb(pid) for pid in workers]
            release.set()
            for proc in procs:
                proc.join(60)
    finally:
        server.stop()
    results["open_sessions_per_s"] = round(args.sessions / open_s, 1)
    results["stepping"] = latency_summary(latencies, elapsed)
    results["in_flight_requests_max"] = args.clients * args.threads
    results["worker_rss_mb_idle"] = [round(x, 1) for x in rss_idle]
    results["worker_rss_mb_sessions_open"] = [round(x, 1) for x in rss_open]
    results["worker_rss_mb_episodes_live"] = [round(x, 1) for x in rss_live]
    # An upper bound: it includes loading the environment's data once per worker, on its first session.
    results["mb_per_live_session"] = round((sum(rss_live) - sum(rss_idle)) / args.sessions, 3)
    results["load_before"] = load_before
    results["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results))
        return 0
    table = Table("measure", "result", title=f"load test: {args.sessions} sessions, {args.workers} workers")
    for name, value in results.items():
        table.add_row(name, json.dumps(value))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
