"""What info deltas buy an env server: the same `envgym serve` driven by sessions that ask for them and sessions
that do not, in alternating rounds, next to in-process envs of the same run.

    python experiments/info_delta.py [--env envgym/retail-v0] [--sessions 64] [--rounds 4] [--steps 20] [--json]

A tool world's info carries the whole conversation and the tool list; with deltas a step's answer carries only the
step's new messages (see envgym.sandbox.wire). Prints steps/s per round for each mode (64 client threads, and one
event loop), the best round of each over the best in-process round, and CPU microseconds a step in this (client)
process and in the server's workers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import envgym  # noqa: E402,F401  (registers the bundled environments)
from benchmarks.serving import cpu_s, drive, drive_async, start_server  # noqa: E402
from envgym.remote import RemoteEnv  # noqa: E402

MODES = ("in_process", "deltas_threads", "whole_threads", "deltas_asyncio", "whole_asyncio")


def measure(env_id: str, sessions: int, rounds: int, steps: int, workers: int, progress: Progress) -> dict[str, Any]:
    server = start_server(env_id, workers)
    pids = server.worker_pids()
    local = [[gym.make(env_id)] for _ in range(sessions)]
    remote = {mode: [RemoteEnv(server.url, token_file=server.token_file) for _ in range(sessions)]
              for mode in ("deltas", "whole")}
    for env in remote["whole"]:
        env._ask_info_delta = False  # as against a server that predates deltas
    steps_per_s: dict[str, list[float]] = {mode: [] for mode in MODES}
    client = dict.fromkeys(MODES, 0.0)
    served = dict.fromkeys(MODES, 0.0)
    task = progress.add_task(f"{env_id}, {sessions} sessions", total=rounds * len(MODES))
    try:
        for _ in range(rounds):
            for mode in MODES:
                started, serving = cpu_s(), sum(cpu_s(pid) for pid in pids)
                if mode == "in_process":
                    result = drive(local, steps)
                else:
                    envs = remote[mode.split("_")[0]]
                    result = drive([[e] for e in envs], steps) if mode.endswith("threads") else drive_async(envs, steps)
                steps_per_s[mode].append(result["steps_per_s"])
                client[mode] += cpu_s() - started
                served[mode] += sum(cpu_s(pid) for pid in pids) - serving
                progress.advance(task)
    finally:
        for envs in [*remote.values(), [e for (e,) in local]]:
            for env in envs:
                env.close()
        server.stop()
    best = max(steps_per_s["in_process"])
    per_step = 1e6 / (rounds * steps * sessions)
    return {
        "env": env_id, "sessions": sessions, "workers": workers, "steps_per_s": steps_per_s,
        "best_over_in_process": {mode: round(max(v) / best, 3) for mode, v in steps_per_s.items()},
        "client_cpu_us_per_step": {mode: round(v * per_step, 1) for mode, v in client.items()},
        "workers_cpu_us_per_step": {mode: round(v * per_step, 1) for mode, v in served.items() if mode != "in_process"},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="envgym/retail-v0")
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="steps per session in a round")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with Progress(disable=args.json) as progress:
        report = measure(args.env, args.sessions, args.rounds, args.steps, args.workers, progress)
    report = {"load_before": load_before, **report, "load_after": os.getloadavg()}
    if args.json:
        print(json.dumps(report))
        return 0
    table = Table(title=f"{args.env}: {args.sessions} sessions, envgym serve --workers {args.workers}")
    for column in ("mode", "steps/s per round", "best / in-process", "client CPU us/step", "workers CPU us/step"):
        table.add_column(column)
    for mode in MODES:
        table.add_row(
            mode, ", ".join(f"{x:,.0f}" for x in report["steps_per_s"][mode]),
            f"{report['best_over_in_process'][mode]:.3f}", f"{report['client_cpu_us_per_step'][mode]:.0f}",
            f"{report['workers_cpu_us_per_step'].get(mode, 0):.0f}",
        )  # fmt: skip
    Console().print(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
