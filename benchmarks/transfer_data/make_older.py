"""Build the older-synthesizer arm's SFT data (issue 39 part 4): run with an older checkout of `synth/` and `envgym/`
first on the path (see README.md here). Uses only the API that checkout has: `run_pipeline`, `fair_demonstrations`.

    PYTHONPATH=OLD_CHECKOUT python3 benchmarks/transfer_data/make_older.py --seed 11 --domains 24 --tasks 24 OUT.jsonl.gz

Every task whose fair-planner conversation fails (or uses an unseen value) is left out and counted on stderr.
Rows, in domain then task order: {"domain", "task_id", "messages", "tools"}; the gzip header has no time stamp, so the
same checkout and arguments give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
from pathlib import Path


def main() -> int:
    import synth
    from synth.pipeline import SynthConfig, run_pipeline
    from synth.subsets import fair_demonstrations

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--domains", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=24)
    args = parser.parse_args()
    print(f"synth from {Path(synth.__file__).parent}", file=sys.stderr)
    rows, failed = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        run_pipeline(SynthConfig(seed=args.seed, domains=args.domains, tasks_per_env=args.tasks), tmp)
        for folder in sorted(p for p in Path(tmp).iterdir() if (p / "world.yaml").exists()):
            ids = [json.loads(line)["id"] for line in (folder / "tasks.jsonl").read_text().splitlines() if line.strip()]
            for task_id in ids:
                try:
                    (demo,) = fair_demonstrations(folder, [task_id])
                except (RuntimeError, KeyError, ValueError):
                    failed += 1
                    continue
                rows.append({"domain": folder.name, "task_id": task_id, "messages": demo["messages"],
                             "tools": demo["tools"]})
    with open(args.out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as handle:
        handle.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode())
    print(f"{len(rows)} demonstrations from {len({r['domain'] for r in rows})} domains, {failed} tasks left out",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
