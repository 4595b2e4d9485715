"""Whole GRPO steps of a recipe run, from its warm start: what a step costs, without the recipe's evaluations.

`python experiments/grpo_steps.py --from runs/mt_s2 --steps 3 [--allocator keep|glibc] [--sampler-dtype bfloat16] [--seed 2]
[--whole-rows] [--overlap] [--set FIELD=VALUE] [--out runs/grpo_steps]`

Builds the environment of the recipe that ran in `--from` (examples/multiturn_grpo.yaml by default), loads the
warm-started weights it saved (`warm_start.pt`), and runs `--steps` GRPO steps of its setting (the step metrics rows of
`envgym train`, in `--out/metrics.jsonl`), then prints each step's rollout, update and step seconds with the load.
`--allocator` is the process's C allocator: `keep` (what `envgym train` sets: `envgym.sandbox.malloc.keep_freed_memory`)
or `glibc` (its defaults). Two processes that differ only there take the same steps: same episodes, same loss.
`--sampler-dtype` overrides the recipe's `grpo.sampler_dtype` (a bfloat16 sampler draws other episodes).
`--whole-rows` makes every sampler row keep its own copy of the prefix all rows share (the sampler before
`generation.SHARED_PREFIX_MIN`: the same tokens, up to float rounding). `--overlap` runs the rollouts in the async
worker with a staleness bound of one (`async_rollouts`, `max_staleness: 1`): step k+1's episodes are sampled during
step k's update, by weights one update older (the truncated importance weight corrects them); the step's `rollout_s`
is then the time the learner waited for them.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
import yaml

from envgym.sandbox.malloc import keep_freed_memory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a recipe run's output folder")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--allocator", choices=("keep", "glibc"), default="keep")
    parser.add_argument("--seed", type=int, default=None, help="the GRPO seed (default: the recipe's)")
    parser.add_argument("--sampler-dtype", choices=("float32", "bfloat16"), default=None)
    parser.add_argument("--whole-rows", action="store_true", help="no prefix held once by the sampler")
    parser.add_argument("--overlap", action="store_true",
                        help="async rollouts with a staleness bound of one: step k+1's rollouts during step k's update")
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                        help="replace a GRPO field of the recipe (YAML value), e.g. credit_requires_answer=false")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/grpo_steps"))
    args = parser.parse_args()
    if args.whole_rows:
        from envgym.train import generation

        generation.SHARED_PREFIX_MIN = 2**62
    if args.allocator == "keep" and not keep_freed_memory():
        raise SystemExit("grpo_steps: --allocator keep needs glibc")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from update_ab import build  # beside this script

    out = args.out / "-".join([args.allocator, *([args.sampler_dtype] if args.sampler_dtype else []),
                               *(["whole-rows"] if args.whole_rows else []), *(["overlap"] if args.overlap else [])])
    for stale in ("metrics.jsonl", "rollouts.jsonl"):
        (out / stale).unlink(missing_ok=True)
    overrides = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.sets)}
    if args.overlap:
        overrides.update(async_rollouts=True, max_staleness=1)
    trainer = build(args.source, out, args.threads, seed=args.seed, sampler_dtype=args.sampler_dtype, **overrides)
    trainer.config.max_steps = args.steps
    trainer.config.save_every = 0
    load = os.getloadavg()[0]
    started = time.perf_counter()
    rows = trainer.train()
    keys = ("rollout_s", "update_s", "step_s", "reward_mean", "loss", "forwarded_tokens")
    report = {"from": str(args.source), "allocator": args.allocator, "sampler_dtype": trainer.config.sampler_dtype,
              "whole_rows": args.whole_rows, "overlap": args.overlap, "overrides": overrides, "loadavg_start_end": [load, os.getloadavg()[0]],
              "wall_s": round(time.perf_counter() - started, 1),
              "max_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
              "minor_page_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt,
              "steps": [{k: row.get(k) for k in keys} for row in rows]}
    (out / "grpo_steps.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    torch.set_num_threads(2)
    raise SystemExit(main())
