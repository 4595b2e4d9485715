"""Run-13-batch GRPO steps with the code of commit e61c05c (before the step work), from a recipe run's warm start.

    git worktree add /tmp/old_e61 e61c05c && cd /tmp/old_e61
    PYTHONPATH=/tmp/old_e61 OMP_NUM_THREADS=2 python /work/main/docs/results/grpo_step_same_machine/old_steps.py \
        /work/main/runs/mt_single16 /work/main/runs/steps_ab_old_e61c05c 5

It synthesizes the recipe's training domain with that code (seed 1, lookups and aggregates, 24 held out: the same
tasks.jsonl as today's code writes, compared with cmp) and runs run 13's GRPO setting; today's counterpart is
`experiments/grpo_steps.py --from runs/mt_single16 --steps 5 --set credit_requires_answer=false`.
"""

import json
import os
import sys
import time
from pathlib import Path

import torch

from envgym.train import GRPOConfig, GRPOTrainer
from envgym.train.policy import load_policy
from envgym.train.recipe import _synth_suites

torch.set_num_threads(2)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
src, out, steps = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
((env_id, _, _),) = _synth_suites(1, 1, 500, ("lookup", "aggregate"), 24, 0, out / "train")
grpo = dict(model="local", seed=0, group_size=6, tasks_per_step=4, lockstep_groups=True, learning_rate=2e-5,
            beta=0.04, temperature=1.0, reward="env+tools", tool_call_weight=0.1, max_turns=10, max_new_tokens=64,
            max_sequence_tokens=2048, max_steps=steps, save_every=0, learner_dtype="bfloat16", micro_batch_size=2,
            env_id=env_id, output_dir=str(out), heldout_tasks=24)
trainer = GRPOTrainer(GRPOConfig.from_dict(grpo), policy=load_policy("local", 0))
trainer.model.load_state_dict(torch.load(src / "warm_start.pt", weights_only=True))
trainer.freeze_reference()
load = os.getloadavg()[0]
started = time.perf_counter()
rows = trainer.train()
keys = ("rollout_s", "update_s", "step_s", "reward_mean", "loss", "forwarded_tokens")
print(json.dumps({"commit": "e61c05c", "load": [load, os.getloadavg()[0]], "wall_s": time.perf_counter() - started,
                  "steps": [{k: r.get(k) for k in keys} for r in rows]}), flush=True)
