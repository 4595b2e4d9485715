"""experiments/pool_seeds.py on the replication's own reports (docs/results/train_multiturn_recipe_s*): the pooled
table, and `--against`, which compares two settings seed by seed, (c) with (c)."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "experiments" / "pool_seeds.py"
RESULTS = ROOT / "docs" / "results"


def run(*args: str) -> str:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=True,
                          cwd=ROOT).stdout


def test_against_pairs_each_run_with_the_same_seed_of_the_other_setting(tmp_path: Path) -> None:
    seeds = [RESULTS / f"train_multiturn_recipe_s{s}" for s in (1, 2, 3)]
    report = json.loads((seeds[0] / "report.json").read_text())
    changed = copy.deepcopy(report)
    after = changed["per_task"]["train_domain"]["c"]
    flip = [i for i, ok in enumerate(after) if not ok][:3]  # three tasks the other setting failed now succeed
    for i in flip:
        after[i] = True
    changed["per_task"]["all"]["c"][flip[0]] = True  # "all" lists the training domain's tasks first
    folder = tmp_path / "other"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps(changed))
    out = run(str(folder), "--against", *map(str, seeds), "--out", str(tmp_path / "pooled"))
    assert "seeds [1]" in out
    row = next(line for line in out.splitlines() if line.startswith("| train domain") and "/ 0 |" in line)
    assert "| 24 | +12.5 " in row and "| 3 / 0 |" in row
    versus = json.loads((tmp_path / "pooled" / "pooled.json").read_text())["against"]
    assert versus["train_domain"]["gained"] == 3 and versus["never_trained_domains"]["change_points"] == 0.0
    # The same run against itself: no difference anywhere.
    same = run(str(seeds[0]), "--against", str(seeds[0]))
    assert "| train domain, held-out users | 24 | +0.0 [+0.0, +0.0] | 0 / 0 | 0 / 0 | 1.0 |" in same


def test_seeds_that_agree_task_for_task_pool_to_one_seeds_interval(tmp_path: Path) -> None:
    # The four seeds with the answer gate solved the same tasks: pooled, they say what one seed says, no more.
    seeds = [RESULTS / f"train_multiturn_gate_s{s}" for s in (1, 2, 3, 4)]
    one = json.loads((seeds[0] / "report.json").read_text())["paired"]["train_domain"]
    run(*map(str, seeds), "--out", str(tmp_path))
    pooled = json.loads((tmp_path / "pooled.json").read_text())["train_domain"]["pooled"]
    assert pooled["bootstrap95_points"] == one["bootstrap95_points"] == [-16.7, 33.3]
    assert (pooled["gained"], pooled["lost"]) == (24, 16)  # pairs...
    assert (pooled["clusters_better"], pooled["clusters_worse"], pooled["sign_test_p"]) == (6, 4, one["sign_test_p"])
