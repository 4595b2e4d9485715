"""Shared by the env-server benchmarks: start `envgym serve`, drive sessions from threads, time every step."""

from __future__ import annotations

import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym

REPO_ROOT = Path(__file__).resolve().parents[1]
ACTION = "Let me think about it."


@dataclass
class Server:
    proc: subprocess.Popen[str]
    url: str
    token_file: str

    def worker_pids(self) -> list[int]:
        """The worker processes (children of the front), or the front itself when it holds the sessions."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
        return [int(c) for c in children] or [self.proc.pid]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def start_server(env_id: str, workers: int, max_sessions: int = 4096, extra: tuple[str, ...] = ()) -> Server:
    """`envgym serve ENV --workers N` from this checkout, once it listens."""
    argv = [sys.executable, "-m", "envgym.cli", "serve", env_id, "--port", "0", "--json", *extra]
    argv += ["--workers", str(workers), "--max-sessions", str(max_sessions)]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO_ROOT, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"envgym serve {env_id} --workers {workers} exited with code {proc.wait()}")
    address = json.loads(line)
    return Server(proc, address["url"], address["token_file"])


def cpu_s(pid: int | None = None) -> float:
    """CPU seconds (user + system) used so far by process `pid`, or by this process."""
    if pid is None:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def latency_summary(latencies: list[float], elapsed: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {
        "steps": len(ordered),
        "steps_per_s": round(len(ordered) / elapsed, 1),
        "p50_ms": round(1000 * statistics.median(ordered), 2),
        "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
    }


def drive_async(
    envs: list[Any], steps: int, latencies: list[float] | None = None, uvloop: bool = False
) -> dict[str, float]:
    """`drive` from one event loop instead of threads: one coroutine per env (`RemoteEnv.areset` / `astep`), all
    stepped at once. Resets before the clock starts; an episode that ends is reset (not timed). `uvloop`: on
    uvloop's event loop instead of asyncio's own."""
    import asyncio

    flat: list[float] = []

    async def run(env: Any, seed: int) -> None:
        clock = time.perf_counter
        for _ in range(steps):
            started = clock()
            _, _, terminated, truncated, _ = await env.astep(ACTION)
            flat.append(clock() - started)
            if terminated or truncated:
                await env.areset()

    async def main() -> float:
        await asyncio.gather(*(env.areset(seed=seed) for seed, env in enumerate(envs)))
        started = time.perf_counter()
        await asyncio.gather(*(run(env, seed) for seed, env in enumerate(envs)))
        return time.perf_counter() - started

    if uvloop:
        import uvloop as uv

        with asyncio.Runner(loop_factory=uv.new_event_loop) as runner:
            elapsed = runner.run(main())
    else:
        elapsed = asyncio.run(main())
    if latencies is not None:
        latencies += flat
    return latency_summary(flat, elapsed)


def drive(
    envs: list[list[gym.Env[Any, Any]]], steps: int, latencies: list[float] | None = None
) -> dict[str, float]:
    """Steps/s and step latency of `envs` stepped concurrently: one thread per inner list, stepping its envs in
    turn, `steps` steps per env. Every env is reset first; an episode that ends is reset (not timed). Each step's
    latency is also appended to `latencies` when given."""
    per_thread: list[list[float]] = [[] for _ in envs]
    barrier = threading.Barrier(len(envs) + 1)

    def run(group: list[gym.Env[Any, Any]], out: list[float]) -> None:
        for seed, env in enumerate(group):
            env.reset(seed=seed)
        barrier.wait()
        clock = time.perf_counter
        for _ in range(steps):
            for env in group:
                started = clock()
                _, _, terminated, truncated, _ = env.step(ACTION)
                out.append(clock() - started)
                if terminated or truncated:
                    env.reset()

    threads = [threading.Thread(target=run, args=(group, out)) for group, out in zip(envs, per_thread, strict=True)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    flat = [x for out in per_thread for x in out]
    if latencies is not None:
        latencies += flat
    return latency_summary(flat, elapsed)
