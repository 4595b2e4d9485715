"""Is a change to the rollout sampler faster, and does it sample the same tokens? An interleaved A/B in one process.

`python experiments/sampler_ab.py --from runs/mt_s2 --change rows|past|bf16|shared|dtype|bf16cache [--rounds 2]
[--tasks 24 | --groups 4] [--temperature 1.0] [--allocator glibc|keep]`

Builds the environment of the recipe that ran in `--from` (examples/multiturn_grpo.yaml by default), loads the
warm-started weights that run saved (`warm_start.pt`), and plays the same `--tasks` held-out tasks as one lockstep
batch (as many rows as a GRPO step's 4 groups of 6; `--groups 4`: 4 training tasks, 6 episodes each, as a step plays
them) before and after the change, alternating, `--rounds` times each:
- `rows`: `generation.PADDING_BEFORE_ROWS` at infinity (one padded prefill per turn: before) and at its default
  (rows whose batch would be mostly padding prefilled alone: after);
- `past`: each call's cached past padded and stacked into new tensors and copied into the call's buffers (before:
  three copies of every row's past a call) and laid out in those buffers directly (after: one copy);
- `bf16`: the sampler in float32 (before) and under bfloat16 autocast (after; not a change made, a measure of what
  one would buy: it changes the numbers, so the episodes differ and the rows also report seconds per thousand
  positions run, prefilled plus decoded);
- `shared`: every row's copy of the prefix all rows share in its own past (before) and that prefix held once,
  attended to in one batched pass per layer and merged by log-sum-exp (after: `generation.SHARED_PREFIX_MIN`);
- `dtype`: the sampler as it is, with `sampler_dtype` float32 (before) and bfloat16 (after: the knob, its cache in
  bfloat16; other episodes, as `bf16`);
- `bf16cache`: the bfloat16 sampler with its cache holding keys and values as they come out of autocast (before:
  rotated keys in float32, cast to bfloat16 by attention at every step) and in bfloat16 (after: the same episodes).
`--allocator` is the process's C allocator (`glibc`: its defaults, as the A/Bs above ran; `keep`: what `envgym train`
sets, `envgym.sandbox.malloc.keep_freed_memory`). Prints wall seconds, minor page faults (memory first touched), prefill and decode counts, and whether both played the same episodes (same seeds: the same
sampled tokens unless float rounding differs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import resource
import time
from pathlib import Path
from typing import Any

import torch

from envgym.sandbox.malloc import keep_freed_memory
from envgym.train import generation
from envgym.train.recipe import WARM_WEIGHTS, Recipe, _synth_suites
from envgym.train.rollout import run_group


def stacked_past(matches: list[tuple[Any, int]], width: int, capacity: int) -> generation.KeyValues:
    """The sampler's past before the one-copy layout: each row padded, the rows stacked, as new tensors (which the
    call's cache then copies into its buffers)."""
    reference = next(e for e, _ in matches if e is not None).kv
    out: generation.KeyValues = []
    for layer, (like, _) in enumerate(reference):
        keys, values = [], []
        for entry, length in matches:
            empty = like.new_zeros((like.shape[0], 0, like.shape[2]))
            pieces = entry.span(layer, 0, length) if entry else [(empty, empty)]
            key, value = torch.cat([k for k, _ in pieces], dim=1), torch.cat([v for _, v in pieces], dim=1)
            keys.append(torch.nn.functional.pad(key, (0, 0, width - length, 0)))
            values.append(torch.nn.functional.pad(value, (0, 0, width - length, 0)))
        out.append((torch.stack(keys), torch.stack(values)))
    return out


def arms(change: str) -> list[tuple[str, Any, bool]]:
    """(label, a function that puts the sampler (its argument) in that state, whether it samples under a bfloat16
    autocast opened around the rollout) for before and after."""
    rows, past = generation.PADDING_BEFORE_ROWS, generation.SamplerSession._padded_past
    shared = generation.SHARED_PREFIX_MIN
    off = 2**62  # no prefix is held once: every row keeps its own copy (the sampler before that change)

    def state(padding: float, padded_past: Any, shared_min: int = shared, dtype: torch.dtype | None = None,
              cache_as_states_come: bool = False) -> Any:
        def apply(sampler: generation.CachedSampler) -> None:
            generation.PADDING_BEFORE_ROWS = padding
            generation.SamplerSession._padded_past = staticmethod(padded_past)  # type: ignore[method-assign]
            generation.SHARED_PREFIX_MIN = shared_min
            sampler.autocast = dtype
            vars(sampler).pop("new_cache", None)
            if cache_as_states_come:
                sampler.new_cache = lambda lm, capacity, past: generation._BufferCache(  # type: ignore[method-assign]
                    lm.config.num_hidden_layers, capacity, past)
        return apply

    # The earlier changes are measured as they were made: with every row's past whole (no prefix held once).
    if change == "rows":
        return [("before", state(math.inf, past, off), False), ("after", state(rows, past, off), False)]
    if change == "bf16":
        return [("before", state(rows, past, off), False), ("after", state(rows, past, off), True)]
    if change == "dtype":
        return [("before", state(rows, past), False), ("after", state(rows, past, dtype=torch.bfloat16), False)]
    if change == "bf16cache":
        return [("before", state(rows, past, dtype=torch.bfloat16, cache_as_states_come=True), False),
                ("after", state(rows, past, dtype=torch.bfloat16), False)]
    if change == "shared":
        return [("before", state(rows, past, off), False), ("after", state(rows, past), False)]
    return [("before", state(rows, stacked_past, off), False), ("after", state(rows, past, off), False)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a recipe run's output folder")
    parser.add_argument("--change", choices=("rows", "past", "bf16", "shared", "dtype", "bf16cache"), required=True,
                        help="rows: uneven rows prefilled alone; past: the cached past laid out in one copy; "
                             "bf16: the sampler under bfloat16 autocast; shared: the shared prefix held once; "
                             "dtype: sampler_dtype float32 vs bfloat16; bf16cache: the bfloat16 sampler's cache in "
                             "bfloat16 vs as the states come")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tasks", type=int, default=24)
    parser.add_argument("--groups", type=int, default=0,
                        help="play N training tasks, group_size episodes each (a GRPO step's rollout), not --tasks")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--allocator", choices=("glibc", "keep"), default="glibc")
    parser.add_argument("--out", type=Path, default=Path("runs/sampler_ab"))
    args = parser.parse_args()

    from envgym.train.config import GRPOConfig
    from envgym.train.policy import load_policy
    from envgym.train.trainer import GRPOTrainer

    if args.allocator == "keep" and not keep_freed_memory():
        raise SystemExit("sampler_ab: --allocator keep needs glibc")
    torch.set_num_threads(args.threads)
    recipe = Recipe.model_validate(json.loads((args.source / "report.json").read_text())["recipe"])
    ((env_id, *_),) = _synth_suites(recipe.env.seed, 1, recipe.env.tasks, tuple(recipe.env.kinds),
                                      recipe.env.heldout, recipe.env.split_seed, args.out / "train")
    grpo = {**recipe.grpo, "env_id": env_id, "output_dir": str(args.out), "heldout_tasks": recipe.env.heldout}
    trainer = GRPOTrainer(GRPOConfig.from_dict(grpo), policy=load_policy(grpo.get("model", "local"), 0))
    trainer.model.load_state_dict(torch.load(args.source / WARM_WEIGHTS, weights_only=True))
    tasks = (trainer.heldout_tasks + trainer.train_tasks)[: args.tasks]
    if args.groups:
        tasks = [t for t in trainer.train_tasks[: args.groups] for _ in range(trainer.config.group_size)]
    envs = trainer.envs[: len(tasks)] if len(trainer.envs) >= len(tasks) else trainer.envs
    restore = arms("shared")[1][1]  # the sampler as it is
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    results: dict[str, list[dict[str, object]]] = {"before": [], "after": []}
    for round_ in range(args.rounds):
        for label, apply, autocast in arms(args.change):
            apply(trainer.sampler)
            trainer.sampler.stats.update({k: 0 for k in trainer.sampler.stats})
            faults, clock = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
            with bf16 if autocast else contextlib.nullcontext():
                episodes = run_group(envs[: len(tasks)], tasks, trainer.sampler, trainer.limits,
                                     temperature=args.temperature, seed=1000)
            seconds = time.perf_counter() - clock
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults  # pages first touched
            tokens = [tuple(t for s in e.samples for t in s.token_ids) for e in episodes]
            row = {"round": round_, "seconds": round(seconds, 1), "minor_page_faults": faults, **trainer.sampler.stats,
                   "sampled_tokens": sum(len(t) for t in tokens), "rewards": [e.reward for e in episodes],
                   "tokens_hash": hash(tuple(tokens)), "successes": sum(e.reward >= 1.0 for e in episodes)}
            positions = row["prefill_tokens"] + row["decode_row_steps"]
            row["seconds_per_1k_positions"] = round(1000 * seconds / max(positions, 1), 3)
            results[label].append(row)
            print(json.dumps({label: {k: v for k, v in row.items() if k != "rewards"}}), flush=True)
    restore(trainer.sampler)
    same = [b["tokens_hash"] == a["tokens_hash"] for b, a in zip(results["before"], results["after"], strict=True)]
    before = sorted(r["seconds"] for r in results["before"])  # type: ignore[type-var]
    after = sorted(r["seconds"] for r in results["after"])  # type: ignore[type-var]
    summary = {"change": args.change, "tasks": len(tasks), "temperature": args.temperature, "before_s": before, "after_s": after,
               "speedup_of_medians": round(before[len(before) // 2] / after[len(after) // 2], 2),  # type: ignore[operator]
               "same_episodes": same}
    print(json.dumps(summary))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.change}.json").write_text(json.dumps({"summary": summary, **results}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
