"""Run the benchmark suite and write its table.

    python -m benchmarks [--quick] [--only NAME ...] [--list] [--table]

Each benchmark runs in a fresh process (`benchmarks/suite.py` says how); its records, the load average before
and after, the machine and the command are kept in docs/results/benchmarks.json (a run replaces only the
benchmarks it ran) and added at the top of docs/results/history/NAME.md; then docs/results/benchmarks.md and
README.md's Benchmarks table are rendered from benchmarks.json.
`--table` only re-renders. Prints one JSON record per figure as it goes (`--json`: only those lines).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from benchmarks.report import (
    RESULTS,
    ROOT,
    add_history,
    load_results,
    save_results,
    update_readme,
    write_markdown,
)
from benchmarks.suite import SUITE, Benchmark, find, json_objects


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} cores, {cpu}, Python {platform.python_version()}"


def docker_ready() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


def run_one(benchmark: Benchmark, quick: bool, timeout: float) -> dict[str, Any]:
    """Run one benchmark script in a fresh process and return its entry for benchmarks.json."""
    with tempfile.TemporaryDirectory(prefix=f"bench-{benchmark.name}-") as tmp:
        command = [arg.replace("{tmp}", tmp) for arg in benchmark.command(quick)]
        shown = "python " + " ".join(benchmark.command(quick)).replace("{tmp}", "DIR")
        entry: dict[str, Any] = {
            "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"), "quick": quick, "command": shown,
            "what": benchmark.what, "machine": machine(), "load_before": list(os.getloadavg()),
        }
        started = time.perf_counter()
        env = os.environ | {"PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        try:
            done = subprocess.run([sys.executable, *command], cwd=ROOT, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            return entry | {"error": f"timed out after {timeout:.0f} s", "records": []}
        entry["wall_s"] = round(time.perf_counter() - started, 1)
        entry["load_after"] = list(os.getloadavg())
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return entry | {"error": f"exit {done.returncode}: {last[:200]}", "records": []}
        try:
            records = benchmark.extract(json_objects(done.stdout))
        except (StopIteration, KeyError, IndexError, TypeError, ValueError) as exc:
            return entry | {"error": f"output not understood ({type(exc).__name__}: {exc})", "records": []}
        return entry | {"records": [r.as_dict() for r in records]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer samples: the whole suite in a few minutes")
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this benchmark (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the suite and exit")
    parser.add_argument("--table", action="store_true", help="only re-render the tables from benchmarks.json")
    parser.add_argument("--json", action="store_true", help="print only the JSON records")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one benchmark may take")
    args = parser.parse_args()

    if args.list:
        for b in SUITE:
            print(f"{b.name:20s} {b.what}  (python {' '.join(b.command(False))})")
        return 0
    try:
        chosen = [find(name) for name in args.only] if args.only else list(SUITE)
    except KeyError as exc:
        print(f"python -m benchmarks: {exc.args[0]}", file=sys.stderr)
        return 2
    results = load_results()
    if not args.table:
        console = Console(stderr=True, quiet=args.json)
        have_docker = any(b.needs_docker for b in chosen) and docker_ready()
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                      console=console) as progress:
            overall = progress.add_task("benchmark suite", total=len(chosen))
            for benchmark in chosen:
                progress.update(overall, description=f"benchmark suite: {benchmark.name}")
                if benchmark.needs_docker and not have_docker:
                    entry = {"error": "needs a running Docker engine", "records": [], "quick": args.quick,
                             "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                             "command": "python " + " ".join(benchmark.command(args.quick)), "what": benchmark.what}
                else:
                    entry = run_one(benchmark, args.quick, args.timeout)
                results["benchmarks"][benchmark.name] = entry
                save_results(results)  # a benchmark that crashes the runner later keeps what came before
                add_history(benchmark.name, entry)
                for record in entry["records"]:
                    print(json.dumps(record | {"load": entry.get("load_before"), "machine": entry.get("machine")}),
                          flush=True)
                if entry.get("error"):
                    console.print(f"[red]{benchmark.name}: {entry['error']}[/red]")
                progress.advance(overall)
    write_markdown(results, RESULTS.with_suffix(".md"))
    update_readme(results)
    failed = [b.name for b in chosen if results["benchmarks"][b.name].get("error")]
    return 1 if failed and not args.table else 0


if __name__ == "__main__":
    sys.exit(main())
