"""How long an episode of a live MCP world waits for its fresh server, without and with a warm pool.

`python -m benchmarks.mcp_pool [--episodes N] [--think S]`: the knowledge-graph memory server
(@modelcontextprotocol/server-memory), one read per episode and `think` seconds of agent time per episode; prints
p50/p95 of the wait per pool size and the ratio to the baseline without a pool, measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from envgym.world.state import WorldState

# Run as a script, this file's folder comes first on sys.path and benchmarks/synth.py would shadow `synth`.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
from synth.mcp_harvest import harvest  # noqa: E402
from synth.mcp_live import EpisodeMCPTools  # noqa: E402

ENV = {"MEMORY_FILE_PATH": "{state}/memory.jsonl"}


def waits(pool: int, episodes: int, think: float) -> list[float]:
    """Seconds each of `episodes` episodes waited for its server (sorted)."""
    specs = harvest(["mcp-server-memory"], env=ENV)
    with tempfile.TemporaryDirectory() as template:
        tools = EpisodeMCPTools(specs, template, env=ENV, pool=pool)
        read = tools.functions()["read_graph"]
        for _ in range(episodes):
            state = WorldState({})
            read(state)
            time.sleep(think)  # the agent's turns before the episode ends
            tools.stop(state)
        tools.close()
    return sorted(tools.start_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--think", type=float, default=0.5)
    parser.add_argument("--json", action="store_true", help="end with one {metric, value, ...} line per pool size")
    args = parser.parse_args()
    base: float | None = None
    for pool in (0, 1, 2):
        w = waits(pool, args.episodes, args.think)
        p50, p95 = statistics.median(w), w[round(0.95 * (len(w) - 1))]
        base = base or p50
        print(f"pool {pool}: wait p50 {p50:.3f} s, p95 {p95:.3f} s, p50 vs no pool {base / max(p50, 1e-9):.1f}x")
        if args.json and pool:
            print(json.dumps({"metric": f"episode's wait for its server p50, pool of {pool}: none / pool",
                              "value": round(p50, 4), "unit": "s", "baseline": round(base, 4),
                              "ratio": round(base / max(p50, 1e-9), 1)}))


if __name__ == "__main__":
    main()
