"""Many live sessions on one `envgym serve`: agent-like load at 1k to 16k sessions, per level and environment.

    python benchmarks/sessions.py [--envs retail,calculator] [--levels 1000,2000,4000,8000,16384] [--period 2]
                                  [--seconds 60] [--warmup 10] [--workers 2] [--clients 2] [--plain-clients]
                                  [--json]

The load shape of issue 46: each session makes one call every `--period` s +-20% of think time (a step, or a reset
when its episode has ended), from `--clients` client processes on the same machine, each one event loop (uvloop
when installed) driving its share of the sessions through RemoteEnv's asyncio path. Levels run in increasing order
on one server per environment (the sessions of a level stay open for the next one); each level is warmed up for
`--warmup` s and then measured for `--seconds` s.

Printed per level: the server's resident memory (front and workers) and MiB per session (over the server idle
before its first session), offered and achieved calls/s (offered: sessions / period), p50/p99 latency of steps and
of resets, errors by kind, CPU ms per call of the server and of the clients over the window, and the 1-minute load
average at the end of the window (the machine is rarely idle: say so with the numbers). `--json` prints one record per level and a final line with metric/value/goal: the worst p99
(step or reset) at the largest level of the first environment.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import random
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from serving import ACTION, cpu_s, rss_mb, start_server  # benchmarks/serving.py

# This checkout's envgym in the client processes too (spawned children inherit sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CREATE_BATCH = 32  # sessions a client creates at once (each create is a blocking call on a thread)
TIMEOUT_S = 60.0


HEADERS = {
    "env": "env", "sessions": "sessions", "rss_mib": "RSS MiB", "mib_per_session": "MiB/session",
    "offered_calls_per_s": "offered/s", "achieved_calls_per_s": "achieved/s", "step_p50_ms": "step p50",
    "step_p99_ms": "step p99", "reset_p50_ms": "reset p50", "reset_p99_ms": "reset p99", "errors": "errors",
    "server_cpu_ms_per_call": "server CPU ms/call", "client_cpu_ms_per_call": "client CPU ms/call", "load_1min": "load",
}  # fmt: skip


def error_kind(exc: BaseException) -> str:
    """A short name for what went wrong: 'env server unreachable', 'EnvHostError', ... (not the whole message)."""
    message = str(exc)
    if "unreachable" in message:
        return "env server unreachable"
    for name in ("too many sessions", "NotFoundError", "EnvHostError", "InvalidRequestError", "TimeoutError"):
        if name in message:
            return name
    return type(exc).__name__


def client(conn: Connection, url: str, token_file: str, seed: int, keep_heap: bool = True) -> None:
    """One client process: on each command, hold that many sessions, drive them, and send back what it measured.

    With `keep_heap` the process's long-lived heap (its RemoteEnvs and what they hold) is frozen as the server's is
    (`HeapKeeper`): otherwise the client's own full collections, 0.7 to 1.8 s each at load 10 with 1,000 sessions a
    process and collecting nothing, land in the call that allocates at the time (most often a reset, which decodes
    the tool schemas) and are counted as the server's latency."""
    import asyncio

    from envgym.remote import RemoteEnv
    from envgym.sandbox.heap import HeapKeeper

    keeper = HeapKeeper() if keep_heap else None

    try:
        import uvloop

        factory: Any = uvloop.new_event_loop
    except ImportError:
        factory = None
    rng = random.Random(seed)
    envs: list[RemoteEnv] = []
    needs_reset: list[bool] = []

    async def grow(count: int) -> None:
        while len(envs) < count:
            batch = min(CREATE_BATCH, count - len(envs))
            made = await asyncio.gather(
                *(asyncio.to_thread(RemoteEnv, url, token_file=token_file, timeout_s=TIMEOUT_S) for _ in range(batch))
            )
            await asyncio.gather(*(env.areset(seed=len(envs) + i) for i, env in enumerate(made)))
            envs.extend(made)
            needs_reset.extend([False] * batch)

    async def drive(period: float, warmup: float, seconds: float) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        measure_from = loop.time() + warmup
        stop_at = measure_from + seconds
        latencies: dict[str, list[float]] = {"step": [], "reset": []}
        errors: Counter[str] = Counter()

        async def session(index: int) -> None:
            env = envs[index]
            await asyncio.sleep(rng.uniform(0, period))  # sessions start out of phase, as agents would
            while loop.time() < stop_at:
                kind = "reset" if needs_reset[index] else "step"
                began, started = loop.time(), time.perf_counter()
                try:
                    if kind == "reset":
                        await env.areset()
                        needs_reset[index] = False
                        if keeper is not None:
                            keeper.reset(len(envs))
                    else:
                        _, _, terminated, truncated, _ = await env.astep(ACTION)
                        needs_reset[index] = terminated or truncated
                    if began >= measure_from:
                        latencies[kind].append(time.perf_counter() - started)
                except Exception as exc:  # counted by kind; the session resets and goes on
                    needs_reset[index] = True
                    if began >= measure_from:
                        errors[error_kind(exc)] += 1
                await asyncio.sleep(period * rng.uniform(0.8, 1.2))

        await asyncio.gather(*(session(i) for i in range(len(envs))))
        return {"latencies": latencies, "errors": dict(errors), "sessions": len(envs)}

    with asyncio.Runner(loop_factory=factory) as runner:
        while True:
            command = conn.recv()
            if command is None:
                break
            runner.run(grow(command["sessions"]))
            if keeper is not None:
                keeper.created(len(envs))
            conn.send({"ready": True})
            conn.recv()  # go
            conn.send(runner.run(drive(command["period"], command["warmup"], command["seconds"])))
        for env in envs:
            env.close()


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def run_env(env: str, args: argparse.Namespace, progress: Progress) -> list[dict[str, Any]]:
    env_id = env if "/" in env else f"envgym/{env}-v0"
    server = start_server(env_id, args.workers, max_sessions=2 * max(args.levels))
    ctx = mp.get_context("spawn")
    rows = []
    pipes: list[Connection] = []
    procs = []
    try:
        pids = [server.proc.pid, *server.worker_pids()]
        idle = sum(rss_mb(pid) for pid in pids)
        for index in range(args.clients):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(
                target=client, args=(theirs, server.url, server.token_file, index, not args.plain_clients), daemon=True
            )
            proc.start()
            pipes.append(ours)
            procs.append(proc)
        task = progress.add_task(f"{env}: levels", total=len(args.levels))
        for level in args.levels:
            share = [level // args.clients + (i < level % args.clients) for i in range(args.clients)]
            progress.update(task, description=f"{env}: opening {level} sessions")
            for pipe, count in zip(pipes, share, strict=True):
                pipe.send({"sessions": count, "period": args.period, "warmup": args.warmup, "seconds": args.seconds})
            for pipe in pipes:
                pipe.recv()
            progress.update(task, description=f"{env}: {level} sessions, {args.warmup + args.seconds:g} s")
            for pipe in pipes:
                pipe.send("go")
            time.sleep(args.warmup)
            client_pids = [proc.pid for proc in procs if proc.pid is not None]
            cpu_before = [sum(cpu_s(pid) for pid in pids), sum(cpu_s(pid) for pid in client_pids)]
            results = [pipe.recv() for pipe in pipes]
            cpu_used = [
                sum(cpu_s(pid) for pid in pids) - cpu_before[0],
                sum(cpu_s(pid) for pid in client_pids) - cpu_before[1],
            ]
            rss = sum(rss_mb(pid) for pid in pids)
            steps = [x for r in results for x in r["latencies"]["step"]]
            resets = [x for r in results for x in r["latencies"]["reset"]]
            errors: Counter[str] = Counter()
            for r in results:
                errors.update(r["errors"])
            calls = len(steps) + len(resets) + sum(errors.values())
            rows.append({
                "env": env,
                "sessions": level,
                "period_s": args.period,
                "rss_mib": round(rss, 1),
                "mib_per_session": round((rss - idle) / level, 3),
                "offered_calls_per_s": round(level / args.period, 1),
                "achieved_calls_per_s": round(calls / args.seconds, 1),
                "step_p50_ms": percentile(steps, 0.5),
                "step_p99_ms": percentile(steps, 0.99),
                "reset_p50_ms": percentile(resets, 0.5),
                "reset_p99_ms": percentile(resets, 0.99),
                "errors": dict(errors),
                # CPU per call in the window (server: front and workers; clients: the load generator): what the
                # level would need of an idle machine, whatever share of a loaded one it got.
                "server_cpu_ms_per_call": round(1000 * cpu_used[0] / max(calls, 1), 3),
                "client_cpu_ms_per_call": round(1000 * cpu_used[1] / max(calls, 1), 3),
                "load_1min": round(os.getloadavg()[0], 2),
            })  # fmt: skip
            progress.advance(task)
    finally:
        for pipe in pipes:
            with contextlib.suppress(OSError):
                pipe.send(None)
        for proc in procs:
            proc.join(120)
            if proc.is_alive():
                proc.kill()
        server.stop()
    return rows


# Issue 46's goals, by (env, sessions, period): p99 step and reset latency in ms, with 0 errors.
GOALS = {("retail", 4000, 2.0): 100, ("calculator", 8000, 2.0): 200, ("retail", 16384, 8.0): 250}


def _goal(env: str, sessions: Any, period: float) -> str:
    goal = GOALS.get((env, sessions, period))
    return f"< {goal} ms with 0 errors" if goal else "none set for this shape (goals: retail 4,000 / 2 s, calculator 8,000 / 2 s, retail 16,384 / 8 s)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="retail,calculator")
    parser.add_argument("--levels", default="1000,2000,4000,8000,16384")
    parser.add_argument("--period", type=float, default=2.0, help="mean seconds between one session's calls")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured window per level")
    parser.add_argument("--warmup", type=float, default=10.0, help="unmeasured seconds before each window")
    parser.add_argument("--workers", type=int, default=2, help="env-server worker processes")
    parser.add_argument("--clients", type=int, default=2, help="client processes sharing the sessions")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--plain-clients", action="store_true",
                        help="leave the client processes' collector as it is (no HeapKeeper): their own pauses count")
    args = parser.parse_args()
    args.levels = sorted(int(x) for x in args.levels.split(","))
    envs = [e for e in args.envs.split(",") if e]
    rows: list[dict[str, Any]] = []
    with Progress(disable=args.json) as progress:
        for env in envs:
            rows += run_env(env, args, progress)
    worst = rows[len(args.levels) - 1] if rows else {}
    p99 = max((worst.get(k) or 0.0) for k in ("step_p99_ms", "reset_p99_ms")) if worst else None
    if args.json:
        for row in rows:
            print(json.dumps(row))
        print(json.dumps({
            "metric": f"p99 step/reset ms, {worst.get('sessions')} {envs[0]} sessions every {args.period:g} s",
            "value": p99,
            "goal": _goal(envs[0], worst.get("sessions"), args.period),
            "errors": sum(worst.get("errors", {}).values()),
            "load_1min": worst.get("load_1min"),
        }))  # fmt: skip
        return 0
    table = Table(*HEADERS.values(), title=f"sessions calling every {args.period:g} s +-20% (latencies in ms)")
    for row in rows:
        table.add_row(*(str(row[k]) if k != "errors" else json.dumps(row[k]) for k in HEADERS))
    Console(width=200).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
