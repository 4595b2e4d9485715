"""Replay the rollouts of chosen GRPO steps of a `train_multiturn.py` run with its warm-started weights: the same
tasks (the uniform sampler's draw for each step), the same sampling seeds, temperature and limits as the trainer,
only the weights are the ones GRPO started from. A step whose success is as low under the warm start as it was in
the run drew hard tasks; a step that the warm start passes and the run failed was the updates' doing. Step 0 is
the check: the run made it with these very weights, so its numbers must come out the same.

    python experiments/replay_steps.py --run /work/runs/mt10 --steps 0 2 3 4 --out replay_steps.json
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path

from heldout_per_task import add_run_arguments, load_weights, open_run  # beside this script

from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.curriculum import uniform_task
from envgym.train.rollout import run_group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--steps", type=int, nargs="+", required=True, help="GRPO steps to replay (0 checks)")
    parser.add_argument("--out", default="replay_steps.json")
    args = parser.parse_args()
    run, report, env_id, _, warm = open_run(args)
    grpo = report["grpo"]
    if grpo["sampler"] != "uniform":
        raise SystemExit(f"{run}: sampler {grpo['sampler']!r}; only the uniform sampler's draws can be replayed")
    logged = {row["step"]: row for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    missing_steps = [s for s in args.steps if s not in logged]
    if missing_steps:
        raise SystemExit(f"{run}/metrics.jsonl has no row for steps {missing_steps}")
    words = shlex.split(report["command"])
    seed = int(words[words.index("--seed") + 1]) if "--seed" in words else 0  # train_multiturn.py's default
    config = GRPOConfig(
        env_id=env_id, model="local", output_dir=str(run / "replay"), heldout_tasks=report["suite"]["heldout_tasks"],
        group_size=grpo["group_size"], tasks_per_step=grpo["tasks_per_step"], max_new_tokens=grpo["max_new_tokens"],
        max_sequence_tokens=2048, max_turns=grpo["max_turns"], temperature=grpo["temperature"], max_steps=1,
        save_every=0, seed=seed,
    )
    trainer = GRPOTrainer(config)
    load_weights(trainer.model, warm)
    result = {}
    for step in args.steps:
        episodes = []
        tasks = []
        for index in range(step * config.tasks_per_step, (step + 1) * config.tasks_per_step):
            task = uniform_task(trainer.train_tasks, seed, index)
            tasks.append(task)
            episodes += run_group(trainer.envs, [task] * len(trainer.envs), trainer.sampler, trainer.limits,
                                  temperature=config.temperature, seed=seed * 100_003 + index)
        row = {"tasks": tasks,
               "warm_start_success": round(sum(e.reward >= 1.0 for e in episodes) / len(episodes), 4),
               "warm_start_truncated": round(sum(e.truncated for e in episodes) / len(episodes), 4),
               "run_success": round(logged[step]["success_rate"], 4),
               "run_truncated": round(logged[step]["truncated_fraction"], 4)}
        result[str(step)] = row
        print(step, json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
