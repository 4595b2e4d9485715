"""Pool the seeds of one recipe: `python experiments/pool_seeds.py runs/mt_s1 runs/mt_s2 ... [--out DIR]`.

Each folder holds the report.json of an `envgym train RECIPE.yaml` run. The runs must be one experiment up to the
GRPO seed, output folder and budget (the check `--warm-start-from` makes) and the GRPO fields named by `--free`; a
run that differs elsewhere is named and refused. Prints, per task set, each seed's (b) -> (c) and change, then the mean change over seeds, its spread
and the paired comparison over every (seed, task) pair (`envgym.train.recipe.pool_reports`; its bootstrap draws
tasks, each with its pairs of every seed, since one task's seeds are not independent); with `--out`, writes
pooled.json and pooled.md there. `--with-earlier FILE` also pools the training domain with a run from before the
recipe (run 13: docs/results/train_multiturn_run13/heldout_per_task.json). `--against FOLDER...` compares two
settings seed by seed: each run's (c) against the (c) of the run with the same GRPO seed among FOLDER (another
setting of the same recipe from the same warm start, e.g. without `grpo.credit_requires_answer`), paired over every
(seed, task), the bootstrap again drawing tasks.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from envgym.train.recipe import Recipe, paired, pool_reports, recipe_differences

NAMES = {"train_domain": "train domain, held-out users", "never_trained_domains": "never-trained domains",
         "all": "all held-out tasks"}


def load(folders: list[Path], free: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    reports = [json.loads((folder / "report.json").read_text()) for folder in folders]
    first = Recipe.model_validate(reports[0]["recipe"])
    for folder, report in zip(folders[1:], reports[1:], strict=True):
        differ = recipe_differences(report, first, ("seed", "output_dir", *free))
        if differ:
            raise SystemExit(f"{folder}: another experiment than {folders[0]} (differs in: {', '.join(differ)})")
        if "c" not in report.get("evaluations", {}):
            raise SystemExit(f"{folder}: no evaluation after GRPO yet")
    return reports


def markdown(reports: list[dict[str, Any]], folders: list[Path], pooled: dict[str, Any]) -> str:
    seeds = [r["recipe"]["grpo"].get("seed", 0) for r in reports]
    head = " | ".join(f"seed {s}" for s in seeds)
    lines = [f"| tasks | n | {head} | mean | sd | pooled change, 95% bootstrap | gained / lost | tasks better / worse "
             "| sign p |", "|---" * (len(seeds) + 8) + "|"]
    for key, row in pooled.items():
        if key == "runs":
            continue
        cells = []
        for report in reports:
            b, c = report["evaluations"]["b"][key], report["evaluations"]["c"][key]
            cells.append(f"{b['successes']} → {c['successes']} ({report['paired'][key]['change_points']:+.1f})")
        p = row["pooled"]
        low, high = p["bootstrap95_points"]
        lines.append(f"| {NAMES.get(key, key)} | {reports[0]['paired'][key]['tasks']} | {' | '.join(cells)} | "
                     f"{row['mean_points']:+.1f} | {row['sd_points']:.1f} | {p['change_points']:+.1f} "
                     f"[{low:+.1f}, {high:+.1f}] | {p['gained']} / {p['lost']} | {p['clusters_better']} / "
                     f"{p['clusters_worse']} | {p['sign_test_p']} |")
    steps = [f"seed {s}: {r['grpo']['updates']} updates, median step {r['grpo']['step_s_median']:.0f} s"
             for s, r in zip(seeds, reports, strict=True)]
    lines += ["", "Cells: successes after the warm start → after GRPO (change in points). Pooled: the bootstrap draws "
              "tasks, each with its pairs of every seed; gained / lost counts (seed, task) pairs; a task is better "
              "or worse by its net change over the seeds, and the sign test counts tasks. " + "; ".join(steps)
              + ". Runs: " + ", ".join(str(f) for f in folders) + "."]
    return "\n".join(lines) + "\n"


def with_earlier_run(reports: list[dict[str, Any]], per_task: Path, resamples: int) -> dict[str, Any]:
    """The training domain's pairs pooled with those of a run from before the recipe (`heldout_per_task.json` of
    experiments/train_multiturn.py: per task, its reward after the warm start and after GRPO; run 13's is in
    docs/results/train_multiturn_run13/). Its tasks are its own split, so only the training domain pools."""
    earlier = json.loads(per_task.read_text())
    tasks = list(earlier["after_warm_start"])
    before = [earlier["after_warm_start"][t]["reward"] >= 1.0 for t in tasks]
    after = [earlier["after_grpo"][t]["reward"] >= 1.0 for t in tasks]
    clusters: list[tuple[str, int]] = [("earlier", i) for i in range(len(tasks))]
    changes = [100 * (sum(after) - sum(before)) / len(tasks)]
    for report in reports:
        b, c = report["per_task"]["train_domain"]["b"], report["per_task"]["train_domain"]["c"]
        before, after = before + b, after + c
        clusters += [("recipe", i) for i in range(len(b))]
        changes.append(report["paired"]["train_domain"]["change_points"])
    mean = sum(changes) / len(changes)
    spread = (sum((x - mean) ** 2 for x in changes) / max(len(changes) - 1, 1)) ** 0.5
    return {"runs": len(changes), "changes_points": [round(x, 1) for x in changes], "mean_points": round(mean, 1),
            "sd_points": round(spread, 1), "pooled": paired(before, after, resamples, clusters=clusters)}


def against_runs(reports: list[dict[str, Any]], others: list[dict[str, Any]], resamples: int) -> dict[str, Any]:
    """Per task set, (c) of `reports` against (c) of the run in `others` with the same GRPO seed, pooled over every
    (seed, task); both sides must have evaluated the same tasks from the same warm start (the same (b))."""
    by_seed = {r["recipe"]["grpo"].get("seed", 0): r for r in others}
    out: dict[str, Any] = {"seeds": []}
    pairs: dict[str, tuple[list[bool], list[bool], list[int]]] = {}
    for report in reports:
        seed = report["recipe"]["grpo"].get("seed", 0)
        if seed not in by_seed:
            raise SystemExit(f"--against: no run with GRPO seed {seed}")
        other = by_seed[seed]
        if "c" not in other.get("evaluations", {}):
            raise SystemExit(f"--against: seed {seed}'s run has no evaluation after GRPO yet")
        out["seeds"].append(seed)
        for key in report["paired"]:
            if other["per_task"][key]["b"] != report["per_task"][key]["b"]:
                raise SystemExit(f"--against: seed {seed}'s runs start from different evaluations (b) on {key}")
            before, after, tasks = pairs.setdefault(key, ([], [], []))
            before += other["per_task"][key]["c"]
            after += report["per_task"][key]["c"]
            tasks += range(len(report["per_task"][key]["c"]))
    out.update({key: paired(before, after, resamples, clusters=tasks) for key, (before, after, tasks) in
                pairs.items()})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path, help="output folders of runs of one recipe")
    parser.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples of the pooled change")
    parser.add_argument("--out", type=Path, help="write pooled.json and pooled.md here")
    parser.add_argument("--free", action="append", default=[], metavar="FIELD",
                        help="a further GRPO field the runs may differ in (say so beside the table), e.g. learner_dtype")
    parser.add_argument("--with-earlier", type=Path, metavar="HELDOUT_PER_TASK_JSON",
                        help="also pool the training domain with a run from before the recipe (e.g. run 13's)")
    parser.add_argument("--against", nargs="+", type=Path, metavar="FOLDER",
                        help="runs of another setting with the same GRPO seeds: compare (c) with (c), seed by seed")
    args = parser.parse_args(argv)
    reports = load(args.folders, tuple(args.free))
    pooled = pool_reports(reports, args.resamples)
    table = markdown(reports, args.folders, pooled)
    if args.with_earlier:
        pooled["train_domain_with_earlier"] = extra = with_earlier_run(reports, args.with_earlier, args.resamples)
        p = extra["pooled"]
        table += (f"\nTraining domain with {args.with_earlier} as one more seed: changes "
                  f"{', '.join(f'{x:+.1f}' for x in extra['changes_points'])}; mean {extra['mean_points']:+.1f} "
                  f"(sd {extra['sd_points']:.1f}); pooled {p['change_points']:+.1f} [{p['bootstrap95_points'][0]:+.1f}, "
                  f"{p['bootstrap95_points'][1]:+.1f}], {p['gained']} gained / {p['lost']} lost, tasks "
                  f"{p['clusters_better']} better / {p['clusters_worse']} worse, sign p {p['sign_test_p']}.\n")
    if args.against:
        pooled["against"] = versus = against_runs(reports, [json.loads((f / "report.json").read_text())
                                                            for f in args.against], args.resamples)
        table += (f"\nAgainst {', '.join(str(f) for f in args.against)} (seeds {versus['seeds']}; (c) of these runs "
                  "against (c) of the same seed there, pooled over every seed and task):\n\n"
                  "| tasks | n | change, 95% bootstrap | better here / there (pairs) | tasks better / worse | sign p "
                  "|\n|---|---|---|---|---|---|\n")
        for key, p in versus.items():
            if key != "seeds":
                low, high = p["bootstrap95_points"]
                table += (f"| {NAMES.get(key, key)} | {p['tasks']} | {p['change_points']:+.1f} [{low:+.1f}, "
                          f"{high:+.1f}] | {p['gained']} / {p['lost']} | {p['clusters_better']} / "
                          f"{p['clusters_worse']} | {p['sign_test_p']} |\n")
    sys.stdout.write(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pooled.json").write_text(json.dumps(pooled, indent=2) + "\n")
        (args.out / "pooled.md").write_text(table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
