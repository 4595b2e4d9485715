"""Does prefilling uneven rows alone make lockstep rollouts faster? An interleaved A/B in one process.

`python experiments/prefill_rows_ab.py --from runs/mt_s2 [--rounds 2] [--tasks 24] [--temperature 1.0]`

Builds the environment of the recipe that ran in `--from` (examples/multiturn_grpo.yaml by default), loads the
warm-started weights that run saved (`warm_start.pt`), and plays the same `--tasks` held-out tasks as one lockstep
batch (what a GRPO step's 4 groups of 6 are) with `generation.PADDING_BEFORE_ROWS` at infinity (one padded
prefill per turn: before) and at its default (rows whose batch would be mostly padding prefilled alone: after),
alternating, `--rounds` times each. Prints wall seconds, prefill and decode counts, and whether both played the
same episodes (same seeds: same sampled tokens but for float rounding).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import torch

from envgym.train import generation
from envgym.train.recipe import WARM_WEIGHTS, Recipe, _synth_suites
from envgym.train.rollout import run_group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a recipe run's output folder")
    parser.add_argument("--recipe", default="examples/multiturn_grpo.yaml")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("runs/prefill_rows_ab"))
    args = parser.parse_args()

    from envgym.train.config import GRPOConfig
    from envgym.train.policy import load_policy
    from envgym.train.trainer import GRPOTrainer

    torch.set_num_threads(args.threads)
    recipe = Recipe.model_validate(json.loads((args.source / "report.json").read_text())["recipe"])
    ((env_id, _, _),) = _synth_suites(recipe.env.seed, 1, recipe.env.tasks, tuple(recipe.env.kinds),
                                      recipe.env.heldout, recipe.env.split_seed, args.out / "train")
    grpo = {**recipe.grpo, "env_id": env_id, "output_dir": str(args.out), "heldout_tasks": recipe.env.heldout}
    trainer = GRPOTrainer(GRPOConfig.from_dict(grpo), policy=load_policy(grpo.get("model", "local"), 0))
    trainer.model.load_state_dict(torch.load(args.source / WARM_WEIGHTS, weights_only=True))
    tasks = (trainer.heldout_tasks + trainer.train_tasks)[: args.tasks]
    envs = trainer.envs[: len(tasks)] if len(trainer.envs) >= len(tasks) else trainer.envs
    default = generation.PADDING_BEFORE_ROWS
    results: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        for label, factor in (("before", math.inf), ("after", default)):
            generation.PADDING_BEFORE_ROWS = factor
            trainer.sampler.stats.update({k: 0 for k in trainer.sampler.stats})
            clock = time.perf_counter()
            episodes = run_group(envs[: len(tasks)], tasks, trainer.sampler, trainer.limits,
                                 temperature=args.temperature, seed=1000)
            seconds = time.perf_counter() - clock
            tokens = [tuple(t for s in e.samples for t in s.token_ids) for e in episodes]
            row = {"round": round_, "seconds": round(seconds, 1), **trainer.sampler.stats,
                   "sampled_tokens": sum(len(t) for t in tokens), "rewards": [e.reward for e in episodes],
                   "tokens_hash": hash(tuple(tokens))}
            results[label].append(row)
            print(json.dumps({label: {k: v for k, v in row.items() if k != "rewards"}}), flush=True)
    generation.PADDING_BEFORE_ROWS = default
    same = [b["tokens_hash"] == a["tokens_hash"] for b, a in zip(results["before"], results["after"], strict=True)]
    before = sorted(r["seconds"] for r in results["before"])  # type: ignore[type-var]
    after = sorted(r["seconds"] for r in results["after"])  # type: ignore[type-var]
    summary = {"tasks": len(tasks), "temperature": args.temperature, "before_s": before, "after_s": after,
               "speedup_of_medians": round(before[len(before) // 2] / after[len(after) // 2], 2),  # type: ignore[operator]
               "same_episodes": same}
    print(json.dumps(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ab.json").write_text(json.dumps({"summary": summary, **results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
