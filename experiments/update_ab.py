"""Is a change to the GRPO update faster, and does it take the same step? An interleaved A/B in one process.

`python experiments/update_ab.py --from runs/mt_s2 --arms boolmask,mb2 [--rounds 2] [--allocator keep|glibc]`

Builds the environment of the recipe that ran in `--from` (examples/multiturn_grpo.yaml by default), loads the
warm-started weights that run saved (`warm_start.pt`) as policy and KL reference, makes one step's rollouts (run 13's
batch: 4 lockstep groups of 6; cached in `--out/groups.pt`, so later calls time the same batch), then times
`GRPOTrainer._update` on them once per arm per round, interleaved, from the same weights and a fresh optimizer:
- `mbN`: micro-batches of N samples (run 13: 2); the loss ("dapo", a token mean over the step) is the same sum
  however the samples are cut;
- `boolmask`: micro-batches of 2 with the 2D attention mask (transformers makes its boolean 4D mask from it, which
  SDPA turns into an additive one in every layer: the learner before `StepBatches._additive_mask`);
- `masked`: micro-batches of 2 on top of the prefix with the additive mask over prefix and own tokens (one SDPA pass
  per layer: the learner before `envgym.train.attention`'s prefix pass plus causal pass, which `mbN` runs);
- `denseemb`: micro-batches of 2 whose embedding lookups backpropagate a dense vocabulary x hidden gradient (the
  learner before `learner._sparse_embedding_gradient`).
`--allocator` is the process's C allocator (`keep`: what `envgym train` sets; `glibc`: its defaults).
Each arm's phases (reference forward, policy forward, backward, the rest) and how far its updated weights lie from
the first arm's (max |difference|: float rounding only, if the math is the same) are printed and written to
`--out/update_ab.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from envgym.sandbox.malloc import keep_freed_memory
from envgym.train import learner
from envgym.train.recipe import WARM_WEIGHTS, Recipe, _synth_suites


class Phases:
    """Wall seconds inside wrapped functions (outermost call only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.depth = 0
        self.undo: list[Callable[[], None]] = []

    def wrap(self, owner: Any, name: str, label: Callable[[], str]) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            self.depth += 1
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds[label()] += time.perf_counter() - started

        setattr(owner, name, timed)
        self.undo.append(lambda: setattr(owner, name, original))


@contextlib.contextmanager
def _no_context(lm: Any) -> Iterator[None]:
    yield


def build(source: Path, out: Path, threads: int, seed: int | None = None, sampler_dtype: str | None = None,
          **overrides: Any) -> Any:
    """The GRPO trainer of the recipe that ran in `source`, at its warm start (policy and KL reference); `overrides`
    replace the recipe's GRPO fields."""
    from envgym.train.config import GRPOConfig
    from envgym.train.policy import load_policy
    from envgym.train.trainer import GRPOTrainer

    torch.set_num_threads(threads)
    recipe = Recipe.model_validate(json.loads((source / "report.json").read_text())["recipe"])
    ((env_id, *_),) = _synth_suites(recipe.env.seed, 1, recipe.env.tasks, tuple(recipe.env.kinds),
                                      recipe.env.heldout, recipe.env.split_seed, out / "train")
    grpo = {**recipe.grpo, "env_id": env_id, "output_dir": str(out), "heldout_tasks": recipe.env.heldout}
    if seed is not None:
        grpo["seed"] = seed
    if sampler_dtype is not None:
        grpo["sampler_dtype"] = sampler_dtype
    grpo.update(overrides)
    trainer = GRPOTrainer(GRPOConfig.from_dict(grpo), policy=load_policy(grpo.get("model", "local"), 0))
    trainer.model.load_state_dict(torch.load(source / WARM_WEIGHTS, weights_only=True))
    trainer.freeze_reference()
    return trainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--from", dest="source", type=Path, required=True, help="a recipe run's output folder")
    parser.add_argument("--arms", default="mb2,mb4", help="comma-separated arms (the first is the reference arm)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--step", type=int, default=0, help="which GRPO step's tasks and seeds to roll out")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--allocator", choices=("keep", "glibc"), default="keep")
    parser.add_argument("--out", type=Path, default=Path("runs/update_ab"))
    args = parser.parse_args()
    if args.allocator == "keep" and not keep_freed_memory():
        raise SystemExit("update_ab: --allocator keep needs glibc")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    trainer = build(args.source, args.out, args.threads)
    cached = args.out / f"groups-step{args.step}.pt"
    if cached.exists():
        groups = torch.load(cached, weights_only=False)
    else:
        trainer.step = args.step
        started = time.perf_counter()
        groups = trainer.rollout()
        print(json.dumps({"rollout_s": round(time.perf_counter() - started, 1)}), flush=True)
        torch.save(groups, cached)
    start_weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    start_optimizer = trainer.optimizer.state_dict()

    phases = Phases()
    in_reference = [False]

    def forward_label() -> str:
        return "forward, reference" if in_reference[0] else "forward, policy"

    original_reference = trainer._reference_logprobs

    def reference(batches: Any) -> Any:
        in_reference[0] = True
        try:
            return original_reference(batches)
        finally:
            in_reference[0] = False

    trainer._reference_logprobs = reference
    phases.wrap(learner.StepBatches, "prefix_forward", forward_label)
    phases.wrap(learner.StepBatches, "logprobs", forward_label)
    phases.wrap(learner.PrefixState, "backward", lambda: "backward")
    phases.wrap(torch.Tensor, "backward", lambda: "backward")

    arms = args.arms.split(",")
    rows: list[dict[str, Any]] = []
    first_weights: dict[str, torch.Tensor] | None = None
    additive_mask = learner.StepBatches._additive_mask
    holds_shared_prefix = learner.holds_shared_prefix
    sparse_embedding_gradient = learner._sparse_embedding_gradient
    for round_ in range(args.rounds):
        for arm in arms:
            learner.holds_shared_prefix = (lambda lm: False) if arm in ("boolmask", "masked") else holds_shared_prefix
            dense = arm in ("boolmask", "masked", "denseemb")
            learner._sparse_embedding_gradient = _no_context if dense else sparse_embedding_gradient
            if arm in ("masked", "denseemb"):
                learner.StepBatches._additive_mask = additive_mask  # type: ignore[method-assign]
                trainer.config.micro_batch_size = 2
            elif arm == "boolmask":
                learner.StepBatches._additive_mask = lambda self, micro, dtype: micro.attention  # type: ignore
                trainer.config.micro_batch_size = 2
            elif arm.startswith("mb") and arm[2:].isdigit():
                learner.StepBatches._additive_mask = additive_mask  # type: ignore[method-assign]
                trainer.config.micro_batch_size = int(arm[2:])
            else:
                raise SystemExit(f"update_ab: unknown arm {arm!r} (known: mbN, boolmask, masked, denseemb)")
            trainer.model.load_state_dict(start_weights)
            trainer.optimizer.load_state_dict(start_optimizer)
            phases.seconds.clear()
            started = time.perf_counter()
            stats = trainer._update(groups)
            seconds = time.perf_counter() - started
            weights = trainer.model.state_dict()
            if first_weights is None:
                first_weights = {k: v.detach().clone() for k, v in weights.items()}
            drift = max(float((weights[k] - first_weights[k]).abs().max()) for k in first_weights)
            moved = max(float((first_weights[k] - start_weights[k]).abs().max()) for k in first_weights)
            row = {"round": round_, "arm": arm, "allocator": args.allocator, "update_s": round(seconds, 2),
                   **{k: round(v, 2) for k, v in phases.seconds.items()},
                   "rest": round(seconds - sum(phases.seconds.values()), 2),
                   "loss": stats.get("loss"), "grad_norm": stats.get("grad_norm"),
                   "forwarded_tokens": stats.get("forwarded_tokens"), "padding_tokens": stats.get("padding_tokens"),
                   "max_weight_difference_to_first_arm": drift, "max_weight_change_of_first_arm": moved,
                   "loadavg": round(os.getloadavg()[0], 2)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    (args.out / "update_ab.json").write_text(json.dumps({"from": str(args.source), "arms": arms, "rows": rows},
                                                       indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
