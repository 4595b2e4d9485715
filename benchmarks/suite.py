"""The benchmark suite: which benchmarks it runs, how, and how each one's output becomes records.

Every suite benchmark is a script beside this file that prints JSON (with `--json`, or always). The runner
(`python -m benchmarks`) starts each one in a fresh process, reads the JSON objects it printed, and turns them into
`Record`s: one figure each, with the baseline measured in the same run, their ratio, the goal and whether the
figure meets it. A benchmark that prints an object with `metric` and `value` keys gives that record as it is (the
form new benchmarks should print); the older scripts get a small extractor here.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

OPS: dict[str, Callable[[float, float], bool]] = {
    "<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq,
}


@dataclass(frozen=True)
class Record:
    """One measured figure. `goal` reads "<op> <number>" and applies to `ratio` when there is one, else to `value`."""

    benchmark: str
    metric: str
    value: float
    unit: str = ""
    baseline: float | None = None
    ratio: float | None = None
    goal: str | None = None

    @property
    def met(self) -> bool | None:
        if not self.goal:
            return None
        op, _, threshold = self.goal.partition(" ")
        measured = self.ratio if self.ratio is not None else self.value
        return OPS[op](measured, float(threshold))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"met": self.met}


Extractor = Callable[[list[dict[str, Any]]], list[Record]]


@dataclass(frozen=True)
class Benchmark:
    name: str
    script: str  # beside this file
    args: tuple[str, ...]  # the full run
    quick_args: tuple[str, ...]  # `--quick`: the same measurement, fewer samples
    extract: Extractor
    what: str  # one line for the table
    needs_docker: bool = False

    def command(self, quick: bool) -> list[str]:
        """The script and its arguments, relative to the repository root (`{tmp}` is a scratch folder)."""
        return ["benchmarks/" + self.script, *(self.quick_args if quick else self.args)]


def json_objects(text: str) -> list[dict[str, Any]]:
    """Every top-level JSON object printed in `text`, one-line or indented, in order; other lines are skipped."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    lines = text.splitlines(keepends=True)
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    i = 0
    while i < len(lines):
        if not lines[i].startswith("{"):
            i += 1
            continue
        try:
            obj, end = decoder.raw_decode(text, offsets[i])
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(obj, dict):
            found.append(obj)
        while i < len(lines) and offsets[i] < end:  # skip the lines the object spanned
            i += 1
    return found


def own_records(name: str, objects: list[dict[str, Any]]) -> list[Record]:
    """Objects that already are records (`metric` and `value` keys)."""
    keys = {"metric", "value", "unit", "baseline", "ratio", "goal"}
    return [
        Record(benchmark=name, **{k: v for k, v in o.items() if k in keys})
        for o in objects
        if "metric" in o and "value" in o
    ]


def env_step(objects: list[dict[str, Any]]) -> list[Record]:
    step = next(o for o in objects if "env_steps_per_s" in o)
    guard = next(o for o in objects if "guard_overhead" in o)
    return [
        Record("env_step", "ToolWorldEnv.step, retail lookup: baseline / env (CPU time)", step["env_steps_per_s"],
               "steps/s", step["baseline_calls_per_s"], step["ratio_baseline_over_env"], "<= 3.0"),
        Record("env_step", "cycle collector share of the env's CPU", step["env_collector_share"], "fraction"),
        Record("env_step", "guard overhead per step, workspace", guard["guard_overhead"], "fraction",
               guard["guard_off_us_per_step"], None, "< 0.25"),
    ]


def reset(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    return [Record("reset", "retail reset, copy-on-write over deep copy", r["cow_resets_per_s"], "resets/s",
                   r["deepcopy_resets_per_s"], r["reset_speedup"], ">= 5")]


def cold_start(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    cold = r["docker_cold_start"]
    return [
        Record("sandbox_cold_start", "Docker sandbox cold start p50 over bare `docker run`", cold["p50_ms"], "ms",
               cold["bare_docker_run"]["p50_ms"], cold["cold_over_bare_p50"], "<= 1.5"),
        Record("sandbox_cold_start", "warm-pool acquire p50", r["warm_pool_acquire"]["p50_ms"], "ms"),
    ]


def env_server(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    records = []
    for env, goal in (("calculator", ">= 0.25"), ("retail", ">= 0.8")):
        s = r[f"env_server_{env}-v0"]
        best_local = max(s["in_process_steps_per_s"])
        best_remote = max(s["asyncio_client_steps_per_s"])
        records.append(Record(
            "sandbox_env_server", f"envgym serve --workers 2, 64 sessions, {env}: server / in-process (one loop)",
            best_remote, "steps/s", best_local, s["asyncio_client_over_in_process"], goal))
        records.append(Record("sandbox_env_server", f"envgym serve, 64 sessions, {env}: step p99 (one loop)",
                              s["asyncio_client_step_p99_ms"], "ms"))
    return records


def load(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    return [
        Record("load", f"{r['sessions']} concurrent sessions, {r['env']}: steps/s", r["stepping"]["steps_per_s"],
               "steps/s"),
        Record("load", f"{r['sessions']} concurrent sessions, {r['env']}: step p99", r["stepping"]["p99_ms"], "ms"),
        Record("load", f"{r['sessions']} concurrent sessions, {r['env']}: memory per live session",
               r["mb_per_live_session"], "MiB"),
    ]


def synth(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    domains = r["config"]["domains"]
    return [Record("synth", f"verified synthesized tasks per minute, {domains} domains, 2 workers",
                   r["verified_tasks_per_min"], "tasks/min", None, None, ">= 500")]


def judge(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    row = max(r["groups"], key=lambda g: g["group_size"])
    return [Record("judge", f"judge prompt tokens for a group of {row['group_size']}: whole / de-duplicated",
                   row["mean_prompt_tokens_deduplicated"], "tokens", row["mean_prompt_tokens_whole"],
                   row["ratio_whole_over_deduplicated"])]


def guard_security(objects: list[dict[str, Any]]) -> list[Record]:
    r = objects[-1]
    records = []
    for mode in ("deny", "user"):
        hits = total = 0
        for cell in r["asr"][mode].values():
            n, d = (int(x) for x in cell.split("/"))
            hits, total = hits + n, total + d
        records.append(Record("guard_security", f"workspace attack success, guard on ({mode})", hits / total,
                              "fraction", None, None, "== 0"))
    user = r["oracle"]["user"]
    records.append(Record("guard_security", "oracle calls refused by the guard (user mode)", user["refused"],
                          "calls", None, None, "== 0"))
    return records


def _last_with(objects: list[dict[str, Any]], key: str) -> dict[str, Any]:
    return next(o for o in reversed(objects) if key in o)


def sessions(objects: list[dict[str, Any]]) -> list[Record]:
    r = _last_with(objects, "metric")
    levels = [o for o in objects if "sessions" in o and "step_p99_ms" in o]
    return [
        Record("sessions", r["metric"], r["value"], "ms", None, None, "< 100"),
        Record("sessions", "errors at the largest level", r["errors"], "errors", None, None, "== 0"),
        *[Record("sessions", f"{o['sessions']} {o.get('env', '')} sessions: server MiB per session",
                 o["mib_per_session"], "MiB") for o in levels if "mib_per_session" in o][-1:],
    ]


def gc_pauses(objects: list[dict[str, Any]]) -> list[Record]:
    r = _last_with(objects, "metric")
    before, after = r["variants"][0], r["variants"][-1]
    return [Record("gc_pauses", r["metric"], after["gc_time_share"], "fraction", before["gc_time_share"], r["value"],
                   "> 1")]


def soak(objects: list[dict[str, Any]]) -> list[Record]:
    r = _last_with(objects, "p99_ratio")
    return [
        Record("soak", f"valid-client step p99 beside {r['hostile']} hostile clients: soak / baseline",
               r["soak"]["valid_p99_ms"], "ms", r["baseline"]["valid_p99_ms"], r["p99_ratio"], "<= 3"),
        Record("soak", "server RSS growth after warm-up", r["rss"]["growth_pct"], "%", None, None, "<= 10"),
    ]


def reward_hacking(objects: list[dict[str, Any]]) -> list[Record]:
    r = _last_with(objects, "metric")
    worst = r["worst"]
    return [Record("reward_hacking", f"worst agent / oracle reward (here {worst['agent']} on {worst['env']}, "
                   f"{worst['mode']})", r["value"], "ratio", None, None, "<= 0.5")]


def named(name: str, extract: Extractor) -> Extractor:
    """An extractor that also keeps any records the script printed itself."""
    return lambda objects: extract(objects) + own_records(name, objects)


SUITE: tuple[Benchmark, ...] = (
    Benchmark("env_step", "env_step.py", ("--seconds", "6"), ("--seconds", "1.5"), named("env_step", env_step),
              "env step against the irreducible work; guard overhead"),
    Benchmark("reset", "reset.py", ("--seconds", "6"), ("--seconds", "1.5"), named("reset", reset),
              "reset with copy-on-write state against a deep copy"),
    Benchmark("sandbox_cold_start", "sandbox.py", ("--only", "cold-start", "--json"),
              ("--only", "cold-start", "--json", "--samples", "5"), cold_start,
              "Docker sandbox cold start against bare `docker run`", needs_docker=True),
    Benchmark("sandbox_env_server", "sandbox.py", ("--only", "env-server", "--json"),
              ("--only", "env-server", "--json", "--quick"), env_server,
              "env server against in-process envs, 64 sessions"),
    Benchmark("load", "load.py", ("--json",), ("--json", "--sessions", "200", "--steps", "2"), load,
              "many concurrent sessions on one env server"),
    Benchmark("synth", "synth.py", ("--domains", "20", "--workers", "2"),
              ("--domains", "4", "--tasks-per-env", "8", "--workers", "2"), synth,
              "synthesizer throughput (verified tasks per minute)"),
    Benchmark("judge", "judge.py", ("--tasks", "6", "--json"), ("--tasks", "2", "--json"), judge,
              "judge prompt tokens with prefix de-duplication"),
    Benchmark("guard_security", "guard_security.py", ("--every", "1", "--out", "{tmp}"),
              ("--every", "16", "--out", "{tmp}"), guard_security,
              "workspace attacks with the guard on; false refusals"),
    Benchmark("reward_hacking", "reward_hacking.py", ("--json",),
              ("--json", "--tasks", "3", "--synth-domains", "3", "--out", "{tmp}/reward_hacking.md"), reward_hacking,
              "controls and reward hackers against every training reward, over the oracle"),
    Benchmark("sessions", "sessions.py", ("--json",),
              ("--json", "--envs", "retail", "--levels", "4000", "--seconds", "10", "--warmup", "3"), sessions,
              "thousands of live sessions calling every 2 s on one env server"),
    Benchmark("gc_pauses", "gc_pauses.py", ("--json",), ("--json", "--sessions", "2000", "--seconds", "8"),
              gc_pauses, "collector time of a worker holding many sessions, with and without HeapKeeper"),
    Benchmark("soak", "soak.py", (), ("--minutes", "0.5", "--baseline-s", "8", "--clients", "32", "--hostile", "8"),
              soak, "valid clients beside hostile ones for minutes: latency and memory"),
    Benchmark("mcp_pool", "mcp_pool.py", ("--json",), ("--json", "--episodes", "6"), named("mcp_pool", lambda o: []),
              "a live MCP world's wait for its fresh server, with a warm pool"),
)


def find(name: str) -> Benchmark:
    for benchmark in SUITE:
        if benchmark.name == name:
            return benchmark
    raise KeyError(f"no benchmark {name!r} in the suite; it has: {', '.join(b.name for b in SUITE)}")
