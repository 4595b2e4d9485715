"""Loading SmolLM2 (model + tokenizer) in a new process: from the GGUF file (the baseline) and from the converted
cache (envgym.llm.gguf_cache), each measured in fresh processes in the same run, with the ratio.

Every process imports torch and transformers first (not timed: both pay it), then times `load_gguf_model`.
Run: python experiments/model_load.py [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

from rich.console import Console
from rich.table import Table

CHILD = """
import json, time, sys
import torch, transformers
from envgym.llm.local import default_gguf_path, load_gguf_model
started = time.perf_counter()
model, tokenizer = load_gguf_model(str(default_gguf_path()))
print(json.dumps({"load_s": time.perf_counter() - started}))
"""


def one_load(cache: bool) -> float:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ENVGYM_MODEL_CACHE": "1" if cache else "0"}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise SystemExit(f"the load failed:\n{done.stderr[-3000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["load_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3, help="processes per variant (median reported)")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    args = parser.parse_args()
    console = Console(stderr=True, quiet=args.json)
    with console.status("warming the cache (converts once if it is missing)"):
        one_load(cache=True)
    times: dict[str, list[float]] = {"gguf": [], "cache": []}
    with console.status("timing loads") as status:
        for i in range(args.repeats):
            for variant in times:  # interleaved, so a change in the machine's load hits both alike
                status.update(f"load {i + 1}/{args.repeats}: {variant}")
                times[variant].append(one_load(cache=variant == "cache"))
    gguf, cached = statistics.median(times["gguf"]), statistics.median(times["cache"])
    result = {"gguf_load_s": round(gguf, 3), "cached_load_s": round(cached, 3), "speedup": round(gguf / cached, 1),
              "runs": {k: [round(t, 3) for t in v] for k, v in times.items()},
              "loadavg": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps(result))
        return
    table = Table(title="SmolLM2 load in a new process (median)")
    for column in ("from", "seconds", "runs"):
        table.add_column(column)
    table.add_row("GGUF file (baseline)", f"{gguf:.2f}", " ".join(f"{t:.2f}" for t in times["gguf"]))
    table.add_row("converted cache", f"{cached:.2f}", " ".join(f"{t:.2f}" for t in times["cache"]))
    Console().print(table)
    Console().print(f"speed-up: {gguf / cached:.1f}x   load average: {result['loadavg']}")


if __name__ == "__main__":
    main()
