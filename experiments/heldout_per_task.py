"""Per-task held-out results of a `train_multiturn.py` run: the warm-started weights (the KL reference its final
checkpoint keeps, or with `--beta 0` the run's `warm_start.pt`, or `--warm-start FILE`) and the weights after GRPO,
each evaluated greedily on the held-out tasks exactly as the run's own evaluation does (same envs, seed and limits).
Prints the counts and writes one JSON object: per weights, per task, the verifiable reward, whether the trainer cut
the episode, the needed tool calls and the start of the last message.

    python experiments/heldout_per_task.py --run /work/runs/mt4 --out heldout_per_task.json
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import torch

import envgym  # noqa: F401  (registers envgym/* ids)
from envgym.registry import register_dir
from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.rollout import run_group


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The options naming a `train_multiturn.py` run and its warm-started weights (shared with replay_steps.py)."""
    parser.add_argument("--run", required=True, help="the --out folder of experiments/train_multiturn.py")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--warm-start", help="warm-started weights (a state dict) where the run kept none: a run "
                                             "with --beta 0 made before train_multiturn.py saved warm_start.pt")


def open_run(args: argparse.Namespace) -> tuple[Path, dict[str, Any], str, Path, Path]:
    """The run folder, its report, its env id (registered again), its last checkpoint and its warm-started weights."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    run = Path(args.run)
    report = json.loads((run / "report.json").read_text())
    (env_id,) = register_dir(run / "suite", override=True)
    (checkpoint,) = sorted(run.glob("checkpoint-*"))[-1:]
    candidates = [Path(args.warm_start)] if args.warm_start else [checkpoint / "reference.pt", run / "warm_start.pt"]
    warm = next((c for c in candidates if c.is_file()), None)
    if warm is None:
        raise SystemExit(f"no warm-started weights: none of {', '.join(map(str, candidates))} exists; pass "
                         "--warm-start FILE")
    return run, report, env_id, checkpoint, warm


def load_weights(model: torch.nn.Module, file: Path) -> None:
    """Load a saved state dict into `model`, refusing one whose keys do not match."""
    missing, unexpected = model.load_state_dict(torch.load(file, weights_only=True), strict=False)
    if missing or unexpected:
        raise SystemExit(f"{file}: missing {missing[:3]}, unexpected {unexpected[:3]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--out", default="heldout_per_task.json")
    args = parser.parse_args()
    run, report, env_id, checkpoint, warm = open_run(args)
    grpo = report["grpo"]
    config = GRPOConfig(
        env_id=env_id, model="local", output_dir=str(run / "per_task"), heldout_tasks=report["suite"]["heldout_tasks"],
        group_size=grpo["group_size"], tasks_per_step=grpo["tasks_per_step"], max_new_tokens=grpo["max_new_tokens"],
        max_sequence_tokens=2048, max_turns=grpo["max_turns"], max_steps=1, save_every=0, seed=0,
    )
    trainer = GRPOTrainer(config)
    result: dict[str, dict[str, dict[str, object]]] = {}
    for name, file in (("after_warm_start", warm), ("after_grpo", checkpoint / "model.pt")):
        load_weights(trainer.model, file)
        tasks = list(trainer.heldout_tasks)
        rows: dict[str, dict[str, object]] = {}
        successes = 0
        for start in range(0, len(tasks), len(trainer.envs)):
            chunk = tasks[start : start + len(trainer.envs)]
            episodes = run_group(trainer.envs[: len(chunk)], chunk, trainer.sampler, trainer.limits,
                                 temperature=0.0, seed=config.seed)
            for task, episode in zip(chunk, episodes, strict=True):
                successes += episode.reward >= 1.0
                rows[task] = {"reward": episode.reward, "cut": episode.truncated, "needed": episode.tool_calls_needed,
                              "last": (episode.messages[-1].get("content") or "")[:160]}
        result[name] = rows
        print(name, successes, "/", len(rows), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
