"""A warm start on synthesized service worlds for the bundled retail and travel tasks (issue 39, part 4).

    python experiments/transfer_warm_start.py --from runs/mt_neg01_s1 --out runs/transfer_warm \
        [--kinds lookup,change,branch] [--per-domain 12] [--exclude equity_orders] [--steps 0] [--batch 8]

The bundled retail and travel tasks authenticate a user, look a record up and change it after the user says yes;
the multi-turn recipe's warm start trains on lookups and aggregates only. This SFTs the embedded model on fair-planner
conversations of every domain a recipe run synthesized (`--from`: its `train/`, `transfer/` and `warm/` synthesis
folders, each domain's full task set), cut to `--kinds` (`synth.subsets.kind_subset`: a domain keeps only the tools its
chosen tasks call), `--per-domain` tasks a domain drawn with `--seed`, and `--exclude` domains left out (the
`equity_orders` domain has BFCL's `cancel_order`). Every conversation trained on passes `benchmarks.transfer_leak`
(no BFCL function, backend or question; a leak is an error, not a silent drop), and none comes from retail or travel.
`--steps 0` is one pass over the samples. Writes `--out`/warm_start.pt and report.json (domains, tasks per kind,
samples, target and all tokens, losses); evaluate with `experiments/transfer_checkpoints.py --policy
NAME=OUT/warm_start.pt`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.transfer_leak import bfcl_vocabulary, find_leaks  # noqa: E402


def domain_sources(run: Path) -> list[Path]:
    """Every synthesized domain folder of a recipe run, by name (a name in two folders: the first)."""
    found: dict[str, Path] = {}
    for part in ("train", "transfer", "warm"):
        for folder in sorted((run / part / "synth").glob("*/world.yaml")):
            found.setdefault(folder.parent.name, folder.parent)
    if not found:
        raise SystemExit(f"--from {run}: no <train|transfer|warm>/synth/<domain>/world.yaml (a recipe run's folder?)")
    return [found[name] for name in sorted(found)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from", dest="source", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--kinds", default="lookup,change,branch")
    parser.add_argument("--per-domain", type=int, default=12)
    parser.add_argument("--exclude", default="equity_orders")
    parser.add_argument("--steps", type=int, default=0, help="SFT steps (0: one pass over the samples)")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--learning-rate", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    from envgym.train.policy import load_policy
    from envgym.train.sft import conversation_samples, supervised_fine_tune
    from synth.subsets import fair_demonstrations, kind_subset

    console = Console(stderr=True)
    torch.set_num_threads(args.threads)
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    excluded = {d.strip() for d in args.exclude.split(",") if d.strip()}
    started = time.perf_counter()
    demos: list[dict[str, Any]] = []
    per_domain: dict[str, dict[str, int]] = {}
    for source in domain_sources(args.source):
        if source.name in excluded:
            continue
        try:
            folder, _ = kind_subset(source, args.out / "suite", kinds=kinds, heldout=0, seed=args.seed)
        except ValueError:
            console.print(f"{source.name}: no task of kinds {kinds}, left out")
            continue
        rows = [json.loads(line) for line in (folder / "tasks.jsonl").read_text().splitlines() if line.strip()]
        picked = sorted(random.Random(f"{args.seed}:{source.name}").sample(range(len(rows)),
                                                                           min(args.per_domain, len(rows))))
        chosen = [rows[i] for i in picked]
        demos += fair_demonstrations(folder, [r["id"] for r in chosen])
        per_domain[source.name] = dict(collections.Counter(r["meta"]["kind"] for r in chosen))
        console.print(f"{source.name}: {per_domain[source.name]}")
    leaks = find_leaks(demos, bfcl_vocabulary())
    if leaks:
        raise SystemExit("BFCL data in the demonstrations (exclude the domain): " + "; ".join(leaks[:5]))
    model, tokenizer = load_policy("local", 0)
    eos = tokenizer.eos_token_id
    samples = [s for d in demos for s in conversation_samples(tokenizer, d["messages"], d["tools"], eos)]
    steps = args.steps or len(samples) // args.batch
    console.print(f"{len(demos)} conversations, {len(samples)} samples, {steps} steps of {args.batch}")
    clock = time.perf_counter()
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    losses = supervised_fine_tune(model, samples, steps=steps, batch_size=args.batch, learning_rate=args.learning_rate,
                                  pad_token_id=pad, seed=args.seed, console=console)
    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out / "warm_start.pt")
    report = {"from": str(args.source), "kinds": list(kinds), "per_domain": args.per_domain,
              "excluded": sorted(excluded), "seed": args.seed, "domains": per_domain,
              "conversations": len(demos), "samples": len(samples), "steps": steps, "batch": args.batch,
              "learning_rate": args.learning_rate, "bfcl_leaks": len(leaks),
              "target_tokens": sum(s.trainable_tokens for s in samples),
              "all_tokens": sum(len(s.token_ids) for s in samples),
              "losses": [round(x, 4) for x in losses], "sft_s": round(time.perf_counter() - clock, 1),
              "wall_s": round(time.perf_counter() - started, 1), "load_end": list(os.getloadavg())}
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    console.print({k: v for k, v in report.items() if k != "losses"})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
