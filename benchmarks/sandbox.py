"""Sandbox and env-server benchmark: latencies and throughput, with ratios against baselines of the same run.

    python benchmarks/sandbox.py [--quick] [--json] [--only docker|env-server|cold-start] [--samples N]

Reports Docker cold start p50/p95 next to bare `docker run --rm --network none IMAGE true` on the same image
(interleaved, ratio printed; goal <= 1.5), warm-pool acquire p50/p95, exec round trip (docker and local), 50
concurrent sandboxes started and cleaned up, and `envgym serve --workers N` steps/s and p50/p99 step latency with
64 concurrent sessions next to in-process steps/s, on calculator-v0 (goal >= 0.25) and retail-v0 (goal >= 0.8).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from serving import cpu_s, drive, drive_async, latency_summary, start_server  # noqa: E402  (benchmarks/serving.py)

import envgym  # noqa: E402,F401  (registers the bundled environments)
from envgym.remote import RemoteEnv  # noqa: E402
from envgym.sandbox import SandboxSpec, get_backend  # noqa: E402
from envgym.sandbox.base import LABEL_RUN_ID  # noqa: E402
from envgym.sandbox.pool import SandboxPool  # noqa: E402

GOALS = {"envgym/calculator-v0": 0.25, "envgym/retail-v0": 0.8}
RUN_ID = f"bench-{int(time.time())}"


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p95_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
        "n": len(ordered),
    }


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = fn()
    return time.perf_counter() - started, value


def docker_cold_start(progress: Progress, n: int) -> dict[str, Any]:
    """Cold start p50 next to `docker run --rm --network none IMAGE true` on the same image, interleaved so both
    see the same load on a shared machine."""
    backend = get_backend("docker")
    image = SandboxSpec().image
    bare, ours = [], []
    task = progress.add_task("docker cold start (and bare docker run)", total=n)
    command = ["docker", "run", "--rm", "--network", "none", image, "true"]
    for _ in range(n):
        bare.append(timed(lambda: subprocess.run(command, check=True, capture_output=True))[0])
        seconds, box = timed(lambda: backend.create(SandboxSpec(), run_id=RUN_ID))
        ours.append(seconds)
        box.close()
        progress.advance(task)
    cold, baseline = percentiles(ours), percentiles(bare)
    return {**cold, "bare_docker_run": baseline, "cold_over_bare_p50": round(cold["p50_ms"] / baseline["p50_ms"], 3)}


def pool_acquire(progress: Progress, n: int) -> dict[str, float]:
    spec = SandboxSpec(labels={LABEL_RUN_ID: RUN_ID})
    samples = []
    task = progress.add_task("warm-pool acquire", total=n)
    with SandboxPool(get_backend("docker"), spec, size=4) as pool:
        pool.wait_ready()
        for _ in range(n):
            seconds, box = timed(pool.acquire)
            samples.append(seconds)
            pool.release(box)
            pool.wait_ready()
            progress.advance(task)
    return percentiles(samples)


def exec_round_trip(progress: Progress, backend_name: str, n: int) -> dict[str, float]:
    samples = []
    task = progress.add_task(f"exec round trip ({backend_name})", total=n)
    with get_backend(backend_name).create(SandboxSpec(), run_id=RUN_ID) as box:  # type: ignore[attr-defined]
        for _ in range(n):
            samples.append(timed(lambda: box.exec(["true"]))[0])
            progress.advance(task)
    return percentiles(samples)


def concurrent_sandboxes(progress: Progress, n: int) -> dict[str, float]:
    backend = get_backend("docker")
    task = progress.add_task(f"{n} concurrent sandboxes", total=2 * n)

    def start(_: int) -> Any:
        box = backend.create(SandboxSpec(memory_mb=128), run_id=RUN_ID)
        progress.advance(task)
        return box

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        boxes = list(pool.map(start, range(n)))
    up = time.perf_counter() - started
    assert all(box.exec("echo ok").stdout == "ok\n" for box in boxes)

    def stop(box: Any) -> None:
        box.close()
        progress.advance(task)

    started = time.perf_counter()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(stop, boxes))
    down = time.perf_counter() - started
    left = backend.client.containers.list(all=True, filters={"label": f"{LABEL_RUN_ID}={RUN_ID}"})  # type: ignore[attr-defined]
    return {"n": n, "start_all_s": round(up, 2), "cleanup_all_s": round(down, 2), "left_behind": len(left)}


def env_server_throughput(
    progress: Progress, env_id: str, sessions: int, steps: int, workers: int, rounds: int
) -> dict[str, Any]:
    """Steps/s and step latency of `sessions` RemoteEnvs on `envgym serve --workers N` against the same number of
    in-process envs, in interleaved rounds so all see the same load on a shared machine. The server is driven three
    ways: one client thread per session (`env.step`), and one event loop stepping every session at once
    (`env.astep`, as `envgym.play.aio.astep_many` does), asyncio's own loop and uvloop's. The ratios are best round
    against best round (load only slows things down); each round's is printed, and their median. CPU microseconds per step, which load disturbs far less than
    steps/s, say where a step's time goes: in-process, and for the server this (client) process and the worker
    processes together."""
    modes = ("threads", "asyncio", "uvloop")
    task = progress.add_task(f"env server, {env_id}, {sessions} sessions", total=(1 + len(modes)) * rounds)
    server = start_server(env_id, workers)
    local_envs = [[gym.make(env_id)] for _ in range(sessions)]
    remote_envs = [[RemoteEnv(server.url, token_file=server.token_file)] for _ in range(sessions)]
    local: list[float] = []
    remote: dict[str, list[float]] = {mode: [] for mode in modes}
    latencies: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu = {"in_process": 0.0} | {f"{side}_{mode}": 0.0 for mode in modes for side in ("client", "workers")}
    pids = server.worker_pids()
    try:
        for _ in range(rounds):
            started = cpu_s()
            local.append(drive(local_envs, steps)["steps_per_s"])
            cpu["in_process"] += cpu_s() - started
            progress.advance(task)
            for mode in modes:
                started, serving = cpu_s(), sum(cpu_s(pid) for pid in pids)
                if mode == "threads":
                    result = drive(remote_envs, steps, latencies=latencies[mode])
                else:
                    envs = [env for (env,) in remote_envs]
                    result = drive_async(envs, steps, latencies=latencies[mode], uvloop=mode == "uvloop")
                remote[mode].append(result["steps_per_s"])
                cpu[f"client_{mode}"] += cpu_s() - started
                cpu[f"workers_{mode}"] += sum(cpu_s(pid) for pid in pids) - serving
                progress.advance(task)
    finally:
        for envs in (local_envs, remote_envs):
            for (env,) in envs:
                env.close()
        server.stop()
    result: dict[str, Any] = {"env": env_id, "sessions": sessions, "workers": workers, "in_process_steps_per_s": local}
    for mode in modes:  # the thread-per-session keys keep their first names: earlier results use them
        prefix = "server" if mode == "threads" else f"{mode}_client"
        ratios = [round(r / x, 3) for r, x in zip(remote[mode], local, strict=True)]
        summary = latency_summary(latencies[mode], 1.0)
        result |= {
            f"{prefix}_steps_per_s": remote[mode],
            f"{prefix}_step_p50_ms": summary["p50_ms"],
            f"{prefix}_step_p99_ms": summary["p99_ms"],
            "ratio_per_round" if mode == "threads" else f"{prefix}_ratio_per_round": ratios,
            f"{prefix}_over_in_process": round(max(remote[mode]) / max(local), 3),
            f"{prefix}_median_round_ratio": round(statistics.median(ratios), 3),
        }
    return result | {
        "cpu_us_per_step": {k: round(1e6 * v / (rounds * steps * sessions), 1) for k, v in cpu.items()},
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--workers", type=int, default=2, help="env-server worker processes (default: 2 cores)")
    parser.add_argument(
        "--only",
        choices=["docker", "env-server", "cold-start"],
        help="run one half only (cold-start: docker cold start and warm-pool acquire only)",
    )
    parser.add_argument("--samples", type=int, help="cold starts (and acquires) to time (default 20, --quick 5)")
    parser.add_argument("--rounds", type=int, help="env-server rounds of each mode (default 4, --quick 2)")
    parser.add_argument("--steps", type=int, help="env-server steps a session takes a round (default 20, --quick 10)")
    args = parser.parse_args()
    n = args.samples or (5 if args.quick else 20)
    from envgym.sandbox.image import ensure_image

    results: dict[str, Any] = {"load_before": os.getloadavg()}
    with Progress(disable=args.json) as progress:
        if args.only != "env-server":
            ensure_image(quiet=args.json)
            results["docker_cold_start"] = docker_cold_start(progress, n)
            results["warm_pool_acquire"] = pool_acquire(progress, n)
            if args.only != "cold-start":
                results["exec_round_trip_docker"] = exec_round_trip(progress, "docker", 10 * n)
                results["exec_round_trip_local"] = exec_round_trip(progress, "local", 10 * n)
                results["concurrent_sandboxes"] = concurrent_sandboxes(progress, 10 if args.quick else 50)
            cold, warm = results["docker_cold_start"]["p50_ms"], results["warm_pool_acquire"]["p50_ms"]
            results["warm_over_cold_p50"] = round(warm / cold, 4)
            results["goal_cold_over_bare_p50"] = "<= 1.5"
        if args.only not in ("docker", "cold-start"):
            for env_id, goal in GOALS.items():
                key = f"env_server_{env_id.split('/')[1]}"
                steps = args.steps or (10 if args.quick else 20)
                rounds = args.rounds or (2 if args.quick else 4)
                results[key] = env_server_throughput(progress, env_id, 64, steps, args.workers, rounds)
                results[key]["goal"] = f">= {goal}"
    results["load_after"] = os.getloadavg()
    if args.json:
        print(json.dumps(results))
        return 0
    table = Table("measure", "result")
    for name, value in results.items():
        table.add_row(name, json.dumps(value))
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
