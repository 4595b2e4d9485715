"""Do policies trained elsewhere transfer to the transfer benchmark's held-out sets? (issue 39)

    python experiments/transfer_checkpoints.py --out runs/transfer_ckpt \
        --policy base --policy warm=runs/mt_neg01_s1/warm_start.pt \
        --policy s1=runs/mt_neg01_s1/checkpoint-000013/model.pt [--sets retail,travel] [--max-turns 6]

Each `--policy NAME=WEIGHTS` is the embedded model with a full state dict loaded (a recipe run's `warm_start.pt` or
a checkpoint's `model.pt`); `--policy base` is the embedded model as shipped. Every policy plays the same tasks as
`benchmarks/transfer.py` (its `Evaluator`: the same seeded sample of each set, greedy, the same episode seeds and
limits unless changed here), so a row here stands beside that benchmark's rows. Each policy's per-task results and
its paired change against `base` (bootstrap interval, sign test) go to `--out`/report.json and results.md, rewritten
after each policy; a policy already in the report is kept, not played again.

Success is all-or-nothing, so beside it each episode's behaviour is counted (`behaviour`): tool calls made, calls
the tools answered without an error, questions put to the user, and whether the user was authenticated (a call of
`--auth-tool` that returned no error: the first step of every retail and travel task). Whether a policy's training
data may be shown against BFCL is for its own run to prove (`benchmarks.transfer_leak`): this script plays and counts.
`--show SET:TASK` (repeatable) prints those tasks' transcripts for each policy instead of evaluating.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.transfer import Evaluator, TransferConfig, default_eval_sets  # noqa: E402
from envgym.train.recipe import paired, summarize  # noqa: E402

BEHAVIOUR = ("calls", "calls_ok", "questions", "authenticated")
# How a tool's answer starts when the call failed: envgym's JSON error, and BFCL's executor text or a backend's
# error dict, which BFCL passes on as Python's repr.
ERROR_ANSWERS = ('{"error"', "{'error'", "Error during execution")


def behaviour(messages: list[dict[str, Any]], auth_tool: str) -> dict[str, int]:
    """Counts of one episode's transcript (the policy's raw turns, the env's answers): tool calls, calls answered
    without an error, assistant turns without a call (questions or replies to the user), and 1 when a call of
    `auth_tool` was answered without an error."""
    counts = dict.fromkeys(BEHAVIOUR, 0)
    for index, turn in enumerate(messages):
        if turn.get("role") != "assistant":
            continue
        structured = [c.get("function", {}).get("name", "") for c in turn.get("tool_calls") or []]
        text = " ".join([turn.get("content") or "", *structured])  # raw turns hold their calls as text
        calls = text.count("<tool_call>") + len(structured)
        if not calls:
            counts["questions"] += 1
            continue
        counts["calls"] += calls
        answers = []
        for answer in messages[index + 1 :]:
            if answer.get("role") != "tool":
                break
            answers.append(str(answer.get("content", "")))
        ok = [a for a in answers if not a.lstrip().startswith(ERROR_ANSWERS)]
        counts["calls_ok"] += len(ok)
        if ok and auth_tool in text:
            counts["authenticated"] = 1
    return counts


def play(evaluator: Evaluator, model: Any, tokenizer: Any, auth_tool: str, console: Console
         ) -> tuple[dict[str, list[bool]], dict[str, list[dict[str, int]]]]:
    """`evaluate_tasks` of every set, keeping each episode's `behaviour` as well as its success."""
    from envgym.train.generation import CachedSampler, float32
    from envgym.train.rollout import run_group

    sampler, seed = CachedSampler(model, tokenizer), evaluator.config.eval_seed
    results: dict[str, list[bool]] = {}
    counts: dict[str, list[dict[str, int]]] = {}
    with float32(sampler):
        for label, (envs, ids) in evaluator.sets.items():
            results[label], counts[label] = [], []
            for start in range(0, len(ids), len(envs)):
                chunk = list(ids[start : start + len(envs)])
                for episode in run_group(envs[: len(chunk)], chunk, sampler, evaluator.limits[label],
                                         temperature=0.0, seed=seed + start):
                    results[label].append(episode.reward >= 1.0)
                    counts[label].append(behaviour(episode.messages, auth_tool))
            console.print(f"  {label}: {sum(results[label])}/{len(ids)}")
    if {"retail", "travel"} <= set(results):
        results["retail+travel"] = results["retail"] + results["travel"]
        counts["retail+travel"] = counts["retail"] + counts["travel"]
    return results, counts


def parse_policy(text: str) -> tuple[str, str | None]:
    if text == "base":
        return "base", None
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise SystemExit(f"--policy {text!r}: expected 'base' or NAME=WEIGHTS (a .pt state dict)")
    if not Path(path).is_file():
        raise SystemExit(f"--policy {text!r}: {path} is not a file")
    return name, path


def show(evaluator: Evaluator, policies: list[tuple[str, str | None]], wanted: list[str], auth_tool: str) -> None:
    """Print each policy's transcripts of the `SET:TASK` tasks (greedy, the evaluation's limits)."""
    import torch

    from envgym.train.generation import CachedSampler, float32
    from envgym.train.policy import load_policy
    from envgym.train.rollout import run_group

    chosen: dict[str, list[str]] = {}
    for item in wanted:
        label, _, task = item.partition(":")
        if label not in evaluator.sets or not task:
            raise SystemExit(f"--show {item!r}: expected SET:TASK with SET one of {sorted(evaluator.sets)}")
        chosen.setdefault(label, []).append(task)
    for name, weights in policies:
        model, tokenizer = load_policy("local", 0)
        if weights is not None:
            model.load_state_dict(torch.load(weights, weights_only=True))
        sampler = CachedSampler(model, tokenizer)
        with float32(sampler):
            for label, ids in chosen.items():
                envs = evaluator.sets[label][0]
                for task, episode in zip(ids, run_group(envs[: len(ids)], ids, sampler, evaluator.limits[label],
                                                        temperature=0.0, seed=0), strict=True):
                    print(f"===== {name} {label}:{task} reward {episode.reward} {behaviour(episode.messages, auth_tool)}")
                    for message in episode.messages[1:]:
                        print(f"[{message['role']}] {message.get('content') or ''!r}")


def results_markdown(report: dict[str, Any]) -> str:
    labels = list(report["eval_tasks"]) + (["retail+travel"] if {"retail", "travel"} <= set(report["eval_tasks"])
                                           else [])
    names = list(report["evaluations"])
    lines = ["| eval set | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for label in labels:
        cells = []
        for name in names:
            s = report["evaluations"][name].get(label)
            cells.append("" if s is None else f"{s['successes']}/{s['tasks']} [{s['ci95'][0]:.2f}, {s['ci95'][1]:.2f}]")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if report.get("behaviour"):
        lines += ["", "Behaviour per episode (of each set's episodes: with a call the tools answered without an error; "
                  "authenticated; calls, calls answered without an error and questions per episode):", "",
                  "| eval set | policy | episodes with an ok call | authenticated | calls | ok calls | questions |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for label in labels:
            for name in names:
                rows = report["behaviour"].get(label, {}).get(name)
                if not rows:
                    continue
                n = len(rows)
                lines.append(f"| {label} | {name} | {sum(r['calls_ok'] > 0 for r in rows)}/{n} | "
                             f"{sum(r['authenticated'] for r in rows)}/{n} | "
                             + " | ".join(f"{sum(r[k] for r in rows) / n:.1f}" for k in ("calls", "calls_ok", "questions"))
                             + " |")
    if report.get("paired"):
        lines += ["", "Against base (points, bootstrap 95% interval, gained / lost, sign test p):", "",
                  "| eval set | " + " | ".join(report["paired"]) + " |", "|---|" + "---|" * len(report["paired"])]
        for label in labels:
            cells = []
            for name in report["paired"]:
                p = report["paired"][name].get(label)
                cells.append("" if p is None else f"{p['change_points']:+.1f} [{p['bootstrap95_points'][0]:+.1f}, "
                             f"{p['bootstrap95_points'][1]:+.1f}], {p['gained']} / {p['lost']}, p {p['sign_test_p']:.3g}")
            lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--policy", action="append", required=True, help="'base' or NAME=WEIGHTS; repeatable")
    parser.add_argument("--sets", default="retail,travel", help="labels of transfer.py's eval sets to play")
    parser.add_argument("--eval-tasks", type=int, default=30)
    parser.add_argument("--multi-turn", type=int, default=0,
                        help="BFCL multi_turn_base entries (set 'bfcl multi_turn_base', with that set's own limits)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--max-turns", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--auth-tool", default="find_user_id_by_email")
    parser.add_argument("--show", action="append", default=[], metavar="SET:TASK",
                        help="print these tasks' transcripts for each policy (one lockstep batch per set, episode "
                             "seeds 0, 1, ...) instead of evaluating; repeatable")
    args = parser.parse_args(argv)

    import torch

    from envgym.train.policy import load_policy

    policies = [parse_policy(p) for p in args.policy]
    wanted = [s.strip() for s in args.sets.split(",") if s.strip()]
    sets = [s for s in default_eval_sets(args.eval_tasks, args.multi_turn) if s.label in wanted]
    unknown = set(wanted) - {s.label for s in sets}
    if unknown:
        raise SystemExit(f"--sets: unknown {sorted(unknown)}; transfer.py's sets are "
                         f"{[s.label for s in default_eval_sets(1, 1)]}")
    config = TransferConfig(eval_sets=sets, max_new_tokens=args.max_new_tokens, max_turns=args.max_turns,
                            threads=args.threads)
    torch.set_num_threads(args.threads)
    console = Console(stderr=True)
    if args.show:
        show(Evaluator(config), policies, args.show, args.auth_tool)
        return 0
    if "base" not in [name for name, _ in policies]:
        policies.insert(0, ("base", None))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.json"
    settings = {"sets": wanted, "eval_tasks": args.eval_tasks, "max_new_tokens": args.max_new_tokens,
                "max_turns": args.max_turns, "eval_seed": config.eval_seed,
                "eval_sample_seed": config.eval_sample_seed}
    if args.multi_turn:  # (a key only when used: reports written before it existed still resume)
        settings["multi_turn"] = args.multi_turn
    report: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {}
    if report and report.get("settings") != settings:
        raise SystemExit(f"{path} was written with other settings: {report.get('settings')}")
    report.setdefault("settings", settings)
    report.setdefault("policies", {})
    report.setdefault("evaluations", {})
    report.setdefault("per_task", {})
    report.setdefault("load_start", list(os.getloadavg()))
    evaluator = Evaluator(config)
    report["eval_tasks"] = evaluator.task_ids()
    for name, weights in policies:
        if name in report["evaluations"]:
            if report["policies"].get(name) != weights:
                raise SystemExit(f"policy {name}: the report's was {report['policies'].get(name)}, not {weights}")
            console.print(f"[bold]{name}[/]: in the report, kept")
            continue
        model, tokenizer = load_policy("local", 0)
        if weights is not None:
            model.load_state_dict(torch.load(weights, weights_only=True))
        clock = time.perf_counter()
        console.print(f"[bold]evaluating {name}[/] ({weights or 'the embedded model'})")
        results, counts = play(evaluator, model, tokenizer, args.auth_tool, console)
        del model
        report["policies"][name] = weights
        report["evaluations"][name] = {k: summarize(v) for k, v in results.items()}
        report["evaluations"][name]["seconds"] = round(time.perf_counter() - clock, 1)
        for key, values in results.items():
            report["per_task"].setdefault(key, {})[name] = values
        for key, rows in counts.items():
            report.setdefault("behaviour", {}).setdefault(key, {})[name] = rows
        report["paired"] = {other: {key: paired(runs["base"], runs[other], 2000) for key, runs in
                                    report["per_task"].items() if "base" in runs and other in runs}
                            for other in report["evaluations"] if other != "base"}
        report["load_end"] = list(os.getloadavg())
        path.write_text(json.dumps(report, indent=1))
        (out / "results.md").write_text(results_markdown(report))
    print(results_markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
