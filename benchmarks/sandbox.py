"""Sandbox and env-server benchmark: latencies and throughput, with ratios against baselines of the same run.

    python benchmarks/sandbox.py [--quick] [--json]

Reports Docker cold start p50/p95, warm-pool acquire p50/p95, exec round trip (docker and local),
50 concurrent sandboxes started and cleaned up, and env-server steps/s with 64 concurrent sessions
next to in-process steps/s.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import statistics
import subprocess
import sys
import threading
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

import envgym  # noqa: E402,F401  (registers the bundled environments)
from envgym.remote import RemoteEnv  # noqa: E402
from envgym.sandbox import SandboxSpec, get_backend  # noqa: E402
from envgym.sandbox.base import LABEL_RUN_ID  # noqa: E402
from envgym.sandbox.pool import SandboxPool  # noqa: E402

ENV_ID = "envgym/calculator-v0"
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


def docker_cold_start(progress: Progress, n: int) -> dict[str, float]:
    backend = get_backend("docker")
    samples = []
    task = progress.add_task("docker cold start", total=n)
    for _ in range(n):
        seconds, box = timed(lambda: backend.create(SandboxSpec(), run_id=RUN_ID))
        samples.append(seconds)
        box.close()
        progress.advance(task)
    return percentiles(samples)


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


def steps_per_second(make: Callable[[], gym.Env[Any, Any]], sessions: int, steps: int) -> float:
    """Total steps/s of `sessions` envs stepped concurrently, one thread each."""
    envs = [make() for _ in range(sessions)]
    barrier = threading.Barrier(sessions + 1)

    def drive(env: gym.Env[Any, Any], seed: int) -> None:
        env.reset(seed=seed)
        barrier.wait()
        for _ in range(steps):
            _, _, terminated, truncated, _ = env.step("Let me think about it.")
            if terminated or truncated:
                env.reset()

    threads = [threading.Thread(target=drive, args=(env, i)) for i, env in enumerate(envs)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    for env in envs:
        env.close()
    return sessions * steps / elapsed


def env_server_throughput(progress: Progress, sessions: int, steps: int) -> dict[str, float]:
    task = progress.add_task(f"env server, {sessions} sessions", total=2)
    local = steps_per_second(lambda: gym.make(ENV_ID), sessions, steps)
    progress.advance(task)
    proc = subprocess.Popen(
        [sys.executable, "-m", "envgym.cli", "serve", ENV_ID, "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
    )
    assert proc.stderr is not None
    match = re.search(r"on (http://\S+) \(token file: (\S+)\)", proc.stderr.readline())
    assert match, "envgym serve did not report its address and token file"
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # a full pipe would block the server
    url, token_file = match.group(1), match.group(2)
    try:
        remote = steps_per_second(lambda: RemoteEnv(url, token_file=token_file), sessions, steps)
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    progress.advance(task)
    return {
        "sessions": sessions,
        "in_process_steps_per_s": round(local, 1),
        "server_steps_per_s": round(remote, 1),
        "server_over_in_process": round(remote / local, 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    n = 5 if args.quick else 20
    from envgym.sandbox.image import ensure_image

    ensure_image(quiet=args.json)
    results: dict[str, Any] = {}
    with Progress(disable=args.json) as progress:
        results["docker_cold_start"] = docker_cold_start(progress, n)
        results["warm_pool_acquire"] = pool_acquire(progress, n)
        results["exec_round_trip_docker"] = exec_round_trip(progress, "docker", 10 * n)
        results["exec_round_trip_local"] = exec_round_trip(progress, "local", 10 * n)
        results["concurrent_sandboxes"] = concurrent_sandboxes(progress, 10 if args.quick else 50)
        results["env_server"] = env_server_throughput(progress, 64, 10 if args.quick else 50)
    cold, warm = results["docker_cold_start"]["p50_ms"], results["warm_pool_acquire"]["p50_ms"]
    results["warm_over_cold_p50"] = round(warm / cold, 4)
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
