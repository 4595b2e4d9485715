"""Where a GRPO step's time goes, in run 13's setting of `experiments/train_multiturn.py` (issue 43, part 3).

Builds the same synthesized environment, warm-starts the policy (cached in `--out/warm_start.pt`), then times
`--steps` GRPO steps per mode, back to back from the same warm-started weights:

- `sync`: rollouts then update (lockstep groups, the run-13 setting);
- `overlap`: the rollouts of step k+1 run in a worker thread while the learner updates on step k
  (`async_rollouts` with `lockstep_groups`, `max_staleness=1`).

In `sync` mode every step is also split into phases by wrapping the functions that do the work (exclusive
wall time per phase: a phase's time excludes the phases called inside it). Writes `profile.json` to `--out`
and prints a Markdown table. Example:
`python3 experiments/profile_grpo_step.py --steps 2 --modes sync,overlap --out runs/profile-grpo`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from train_multiturn import build  # beside this script; it fixes sys.path for `synth` as it is imported

from envgym.play.episode import EpisodeRun
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train import learner as learner_module
from envgym.train import trainer as trainer_module
from envgym.train.generation import SamplerSession
from envgym.train.sft import conversation_samples, supervised_fine_tune
from envgym.train.tokens import TrajectoryTokens
from synth.subsets import fair_demonstrations


class PhaseTimer:
    """Exclusive wall time per phase label, per thread, from wrapped callables (nested phases subtract)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()
        self._undo: list[Callable[[], None]] = []

    @contextmanager
    def phase(self, label: str) -> Iterator[None]:
        stack = self._local.__dict__.setdefault("stack", [])
        stack.append([label, 0.0])  # [label, seconds spent in nested phases]
        started = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - started
            _, nested = stack.pop()
            self.seconds[label] += elapsed - nested
            self.calls[label] += 1
            if stack:
                stack[-1][1] += elapsed

    def wrap(self, owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            with self.phase(label):
                return original(*args, **kwargs)

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()

    def take(self) -> dict[str, float]:
        out = {k: round(v, 2) for k, v in sorted(self.seconds.items(), key=lambda kv: -kv[1])}
        self.seconds.clear()
        self.calls.clear()
        return out


def instrument(timer: PhaseTimer) -> None:
    """Wrap the functions a step spends its time in (rollout: sampling, env, tokens; update: the passes)."""
    timer.wrap(SamplerSession, "sample", "rollout: sampling (prefill + decode)")
    timer.wrap(EpisodeRun, "step", "rollout: env step (parse, tools, user)")
    timer.wrap(EpisodeRun, "__init__", "rollout: env reset")
    timer.wrap(TrajectoryTokens, "add_messages", "rollout: tokenize env messages")
    timer.wrap(TrajectoryTokens, "__init__", "rollout: tokenize prompt")
    timer.wrap(learner_module.StepBatches, "__init__", "update: build micro-batches")
    timer.wrap(learner_module.StepBatches, "prefix_forward", "update: forward, reference (no grad) and policy (prefix)")
    timer.wrap(learner_module.StepBatches, "logprobs", "update: forward, reference (no grad) and policy (micro-batches)")
    timer.wrap(learner_module.PrefixState, "backward", "update: backward (prefix)")
    timer.wrap(torch.Tensor, "backward", "update: backward (micro-batches)")
    timer.wrap(trainer_module, "policy_loss", "update: loss")
    timer.wrap(torch.optim.AdamW, "step", "update: optimizer step")
    timer.wrap(torch.nn.utils, "clip_grad_norm_", "update: grad clip")


def warm_started(trainer: GRPOTrainer, args: argparse.Namespace, out: Path) -> dict[str, torch.Tensor]:
    """The warm-started weights: trained once, then read from `out/warm_start-<steps>.pt`."""
    cache = out / f"warm_start-{args.warm_start_steps}.pt"
    if cache.exists():
        return torch.load(cache)
    demos = fair_demonstrations(Path(trainer.envs[0].unwrapped.data.directory), trainer.train_tasks)
    eos = trainer.tokenizer.eos_token_id
    samples = [s for d in demos for s in conversation_samples(trainer.tokenizer, d["messages"], d["tools"], eos)]
    supervised_fine_tune(trainer.model, samples, steps=args.warm_start_steps, batch_size=8, learning_rate=5e-5,
                         pad_token_id=trainer.sampler.pad_token_id, seed=args.seed, console=trainer.console)
    weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    torch.save(weights, cache)
    return weights


class TimingReward:
    """A profiling-only reward: an episode's sampled tokens / 1000. It differs between the episodes of a group,
    so every step makes an update (a barely warm-started policy earns 0 everywhere, and a zero-variance step
    skips its update); what a step costs depends on its samples, never on the reward values."""

    name = "timing"

    def score(self, episodes: list[Any]) -> list[float]:
        return [episode.sampled_tokens / 1000 for episode in episodes]


def run_mode(mode: str, env_id: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    config = GRPOConfig(
        env_id=env_id, model=args.model, output_dir=str(out / mode), heldout_tasks=24, group_size=6,
        tasks_per_step=args.tasks_per_step, max_new_tokens=64, max_sequence_tokens=2048, max_turns=args.max_turns, micro_batch_size=2,
        lockstep_groups=True, learner_dtype="bfloat16", learning_rate=2e-5, beta=0.04, temperature=1.0,
        reward="env+tools", tool_call_weight=0.1, max_steps=args.overlap_steps if mode == "overlap" else args.steps, save_every=0, seed=args.seed,
        async_rollouts=mode == "overlap", max_staleness=1,
    )
    for stale in ("metrics.jsonl", "phases.jsonl"):
        (out / mode / stale).unlink(missing_ok=True)
    trainer = GRPOTrainer(config, reward_source=TimingReward() if args.timing_reward else None)
    trainer.model.load_state_dict(warm_started(trainer, args, out))
    timer = PhaseTimer()
    phases: list[dict[str, float]] = []
    if mode == "sync":
        instrument(timer)
        update = trainer._update

        def update_then_snapshot(groups: list[Any]) -> dict[str, float]:
            stats = update(groups)
            phases.append(timer.take())  # this step's phases, kept as they come in case the run is cut short
            with (out / mode / "phases.jsonl").open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(phases[-1]) + "\n")
            return stats

        trainer._update = update_then_snapshot  # type: ignore[method-assign]
    started = time.perf_counter()
    load = os.getloadavg()[0]
    try:
        rows = trainer.train()
    finally:
        timer.restore()
    wall = time.perf_counter() - started
    keys = ("rollout_s", "update_s", "step_s", "reward_mean", "samples", "trainable_tokens", "forwarded_tokens",
            "padding_tokens", "max_staleness_seen", "dropped_stale", "tokens_per_s")
    return {
        "mode": mode,
        "loadavg_start_end": [round(load, 2), round(os.getloadavg()[0], 2)],
        "wall_s": round(wall, 1),
        # After the first step (which has no update to overlap with), the steady-state step time.
        "steady_step_s": round(statistics.median(r["step_s"] for r in rows[1:]), 1) if len(rows) > 1 else None,
        "steps": [{k: round(r[k], 3) if isinstance(r.get(k), float) else r.get(k) for k in keys} for r in rows],
        "phases_per_step": phases,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="runs/profile-grpo")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps timed in sync mode")
    parser.add_argument("--overlap-steps", type=int, default=3,
                        help="GRPO steps timed in overlap mode (its first step has no update to overlap with)")
    parser.add_argument("--modes", default="sync,overlap", help="comma-separated: sync, overlap")
    parser.add_argument("--warm-start-steps", type=int, default=8)
    parser.add_argument("--tasks-per-step", type=int, default=4, help="lockstep groups of 6 per step (run 13: 4)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-turns", type=int, default=10, help="assistant turns per episode (run 13: 10)")
    parser.add_argument("--timing-reward", action="store_true",
                        help="score episodes with TimingReward (every step updates) instead of env+tools")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model", default="local")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    build_args = argparse.Namespace(synth_seed=1, synth_tasks=500, heldout=24, seed=args.seed)
    env_id, _ = build(build_args, out)
    report: dict[str, Any] = {"command": " ".join(["python3", *sys.argv]), "uptime_before": os.getloadavg()}
    for mode in args.modes.split(","):
        report[mode] = run_mode(mode, env_id, args, out)
        (out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
        print(json.dumps(report[mode], indent=2), flush=True)
    report["uptime_after"] = os.getloadavg()
    (out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
