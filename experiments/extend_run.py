"""Continue a `train_multiturn.py` run past its budget from its last checkpoint, then measure held-out success again.

The trainer resumes as it would after a kill (weights, Adam state, KL reference, step and policy version; the
uniform sampler's draws and sampling seeds continue from that step), so the steps made here are the ones the run
would have made with a longer budget. The out folder gets the run's metrics rows followed by the new ones (so the
reward curve covers the whole run), its checkpoints, its suite, and a report with the run's held-out results at
the warm start and at its budget beside the new one. This answers "would more updates of the same run have
helped?"; it is not a result within the run's own budget.

    python experiments/extend_run.py --run /work/runs/mt8 --minutes 55 --out /work/runs/mt8x
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

from heldout_per_task import add_run_arguments, open_run  # beside this script
from train_multiturn import results_table, step_summary, wilson

from envgym.train import GRPOConfig, GRPOTrainer


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser)
    parser.add_argument("--minutes", type=float, required=True, help="GRPO time added to the run")
    parser.add_argument("--out", required=True, help="a new folder for the continued run")
    args = parser.parse_args()
    run, report, _, checkpoint, _ = open_run(args)
    out = Path(args.out)
    if out.resolve() == run.resolve():
        raise SystemExit("--out must be a new folder: the run's own files stay as they are")
    out.mkdir(parents=True, exist_ok=True)
    shutil.copytree(run / "suite", out / "suite", dirs_exist_ok=True)
    shutil.copy(run / "metrics.jsonl", out / "metrics.jsonl")  # the trainer keeps the rows before its step
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    config = GRPOConfig.from_dict({**state["config"], "output_dir": str(out), "resume_from": str(checkpoint),
                                   "max_steps": 10_000, "save_every": 0}, source=str(checkpoint))
    trainer = GRPOTrainer(config)
    started_step = state["step"]
    rows = trainer.train(max_seconds=args.minutes * 60)
    started = time.perf_counter()
    result = trainer.evaluate()
    wins = round(result["success_rate"] * result["tasks"])
    extended = {**result, "tasks": int(result["tasks"]), "successes": wins, "ci95": wilson(wins, int(result["tasks"])),
                "seconds": round(time.perf_counter() - started, 1), "loadavg": round(os.getloadavg()[0], 2)}
    whole = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    grpo = {**report["grpo"], **step_summary(whole), "budget_minutes": report["grpo"]["budget_minutes"] + args.minutes,
            "steps": len(whole), "updates": sum(int(r["updated"]) for r in whole)}
    extended_report = {
        **report,
        "command": " ".join(shlex.quote(a) for a in [sys.executable.rsplit("/", 1)[-1], *sys.argv]),
        "extends": {"run": str(run), "command": report["command"], "from_step": started_step,
                    "added_minutes": args.minutes, "added_steps": len(rows),
                    "heldout_at_run_budget": report["heldout_after_grpo"]},
        "grpo": grpo,
        "heldout_after_grpo": extended,
        "grpo_success_rise": round(extended["success_rate"] - report["heldout_after_warm_start"]["success_rate"], 4),
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }
    (out / "report.json").write_text(json.dumps(extended_report, indent=2) + "\n")
    (out / "results.md").write_text(results_table(extended_report))
    print(results_table(extended_report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
