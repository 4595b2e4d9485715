"""`experiments/train_calculator.py --nproc N`: GRPO samples per second with 1 and with N data-parallel processes.

Runs `envgym train` under `torchrun --standalone --nproc-per-node K` for K = 1 and K = N with the same settings
and the same torch threads per process (`--nproc-threads`, default 1: N processes use N times the cores, as
data-parallel ranks on more nodes would), `tasks_per_step` = N so every rank rolls out whole groups, and `zero_std_tolerance` -1 so every step updates (a throughput measure, not a
learning run). Samples per second = episodes rolled out and trained on / the summed wall time of the steps after
the first (the first pays for warm-up); the ratio is N processes over 1, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nproc", type=int, default=0,
                        help="measure samples/s with 1 and with NPROC processes under torchrun, then stop")
    parser.add_argument("--nproc-steps", type=int, default=4, help="--nproc: GRPO steps per run (the first is warm-up)")
    parser.add_argument("--model", default="local", help="--nproc: policy model ('local' SmolLM2 or 'tiny-random')")
    parser.add_argument("--nproc-threads", type=int, default=1, help="--nproc: torch threads of every process")


def _run(k: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    run_dir = out / f"nproc-{k}"
    settings = {
        "model": args.model, "output_dir": str(run_dir), "group_size": args.group_size, "tasks_per_step": args.nproc,
        "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns, "max_sequence_tokens": 768,
        "micro_batch_size": 2, "heldout_tasks": args.heldout, "max_steps": args.nproc_steps, "save_every": 0,
        "zero_std_tolerance": -1, "seed": args.seed,
    }
    threads = args.nproc_threads
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={k}",
            "-m", "envgym.cli", "train", *[f"--set={key}={value}" for key, value in settings.items()], "--json"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    (run_dir / "metrics.jsonl").unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall_s = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"--nproc: {k} process(es) failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    timed = rows[1:] or rows
    episodes = sum(sum(r["rollout_groups_per_rank"]) * args.group_size for r in timed)
    seconds = sum(r["step_s"] for r in timed)
    return {
        "processes": k,
        "threads_per_process": threads,
        "steps_timed": len(timed),
        "episodes": episodes,
        "step_s_mean": round(seconds / len(timed), 2),
        "rollout_s_mean": round(sum(r["rollout_s"] for r in timed) / len(timed), 2),
        "update_s_mean": round(sum(r["update_s"] for r in timed) / len(timed), 2),
        "samples_per_s": round(episodes / seconds, 3),
        "groups_per_rank": rows[-1]["rollout_groups_per_rank"],
        "wall_s": round(wall_s, 1),
        "command": shlex.join(argv),
    }


def run_nproc(args: argparse.Namespace) -> int:
    if args.nproc < 2:
        raise SystemExit(f"--nproc {args.nproc}: give at least 2 processes to compare with 1")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    runs = [_run(k, args, out) for k in (1, args.nproc)]
    ratio = runs[1]["samples_per_s"] / runs[0]["samples_per_s"]
    report = {
        "command": shlex.join([sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "model": args.model, "group_size": args.group_size, "tasks_per_step": args.nproc,
        "max_new_tokens": args.max_new_tokens, "max_turns": args.max_turns,
        "runs": runs, "ratio": round(ratio, 3),
        "loadavg_before": [round(x, 2) for x in load_before],
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    (out / "nproc.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "nproc.md").write_text(table(report))
    print(table(report))
    return 0


def table(report: dict[str, Any]) -> str:
    lines = [
        f"`{report['command']}`",
        "",
        "| processes | threads each | steps timed | episodes | s/step (rollout + update) | samples/s | vs 1 process |",
        "|---|---|---|---|---|---|---|",
    ]
    base = report["runs"][0]["samples_per_s"]
    for r in report["runs"]:
        lines.append(
            f"| {r['processes']} | {r['threads_per_process']} | {r['steps_timed']} | {r['episodes']} | "
            f"{r['step_s_mean']} ({r['rollout_s_mean']} + {r['update_s_mean']}) | {r['samples_per_s']} | "
            f"{r['samples_per_s'] / base:.3f} |"
        )
    lines += [
        "",
        f"model {report['model']}, group_size {report['group_size']}, tasks_per_step {report['tasks_per_step']}, "
        f"max_new_tokens {report['max_new_tokens']}, max_turns {report['max_turns']}, "
        "groups per rank in the last step: "
        f"{report['runs'][1]['groups_per_rank']}; load average before/after {report['loadavg_before']} / "
        f"{report['loadavg_after']}.",
        "",
    ]
    return "\n".join(lines)
