"""What does this machine charge for memory touched for the first time? (the cost `keep_freed_memory` avoids)

`python experiments/fresh_pages.py [--blocks 100] [--mb 100]`

Allocates `--blocks` blocks of `--mb` MB one after another, keeping them all, and times filling each (its pages are
touched for the first time); frees them all and does it again. On a virtual machine whose balloon reports free pages
to the host, the first pass slows down once it reaches pages the host has taken back (each touch then faults on the
host too), and the second pass, on pages just freed by this process, does not. Prints seconds per block, every tenth.
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def fill(blocks: int, floats: int) -> list[float]:
    kept, seconds = [], []
    for _ in range(blocks):
        started = time.perf_counter()
        kept.append(torch.ones(floats))
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=100)
    parser.add_argument("--mb", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(2)
    floats = args.mb * 1_000_000 // 4
    report = {}
    for name in ("first", "again"):
        seconds = fill(args.blocks, floats)
        report[name] = {"total_s": round(sum(seconds), 2), "every_tenth_block_s": [round(s, 3) for s in seconds[::10]]}
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
