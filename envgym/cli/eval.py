"""`envgym eval ENV --policy P --runs k`: pass@k, pass^k, security and cost; writes report.md, results.json, chart.png."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from envgym.cli.common import (
    CliError,
    add_env_dir_flag,
    add_json_flag,
    add_policy_model_flags,
    positive_int,
    print_json,
    register_env_dirs,
    stderr,
)
from envgym.cli.progress import episode_bar
from envgym.env import ToolWorldEnv
from envgym.integrations.bfcl import MULTI_TURN_ID, SINGLE_TURN_ID
from envgym.loader import load_environment
from envgym.play.eval import PolicyFactory, evaluate
from envgym.play.labelled import labelled_groups
from envgym.play.make import make_policy
from envgym.play.policies import AttackerPolicy, OraclePolicy
from envgym.registry import find_env_dir, resolve_id
from envgym.rewards.combine import REWARD_KINDS, build_reward_source

POLICIES = ["oracle", "random", "refuse", "attacker", "local", "openai"]


def _policy_factory(args: argparse.Namespace) -> PolicyFactory:
    if args.policy == "attacker":
        return AttackerPolicy
    if args.policy == "oracle":
        return lambda env: OraclePolicy(env.data)
    return lambda env: make_policy(args.policy, seed=args.seed, base_url=args.base_url, model=args.model,
                                   temperature=args.temperature, max_tokens=args.max_tokens)


def cmd_eval(args: argparse.Namespace) -> int:
    register_env_dirs(args)
    if resolve_id(args.env) in (MULTI_TURN_ID, SINGLE_TURN_ID):
        from envgym.cli.bfcl import cmd_eval_bfcl  # imported when asked for: it brings bfcl-eval

        return cmd_eval_bfcl(args, resolve_id(args.env))
    data = load_environment(str(find_env_dir(args.env)))
    env = ToolWorldEnv(data=data, max_steps=args.max_steps, guard=args.guard == "on", confirm=args.confirm)
    unknown_tasks = sorted(set(args.task or []) - {t.id for t in data.tasks})
    if unknown_tasks:
        raise CliError(f"{args.env}: no task {unknown_tasks[0]!r} (it has {len(data.tasks)} tasks)")
    tasks = args.task or [t.id for t in data.tasks][: args.limit]
    attacks: list[str] = []
    if args.attacks:
        if env.security.attacks is None:
            raise CliError(f"{args.env}: this environment has no attack suite")
        known = env.security.attacks.attack_ids()
        attacks = known if args.attacks == ["all"] else args.attacks
        unknown = sorted(set(attacks) - set(known))
        if unknown:
            raise CliError(f"unknown attacks {unknown}; e.g. {known[:3]}")
    total = len(tasks) * (args.runs + len(attacks) * args.attack_runs)
    with episode_bar(f"eval {data.name}", total, enabled=not args.json) as on_episode:
        report = evaluate(env, _policy_factory(args), args.policy, runs=args.runs, tasks=tasks, attacks=attacks,
                          attack_runs=args.attack_runs, seed=args.seed, on_episode=on_episode,
                          reward_source=build_reward_source(
                              args.reward, args.judge_model, args.judge_weight,
                              solutions={t.id: t.solution for t in data.tasks}, labelled=labelled_groups))
    out = Path(args.out or f"runs/eval/{data.name}-{args.policy}")
    paths = report.write(out)
    paths.update(_write_episodes(report.episodes, out, page=args.report))
    summary: dict[str, Any] = {**report.summary(), "files": {k: str(v) for k, v in paths.items()}}
    if args.json:
        print_json(summary)
        return 0
    table = Table("metric", "value")
    for key in ("pass@1", "benign_utility", "utility_under_attack", "targeted_asr", "median_steps",
                "median_tokens", "median_wall_s", "failures"):
        value = summary[key]
        if isinstance(value, dict) and "num" in value:
            value = f"{value['num']}/{value['den']}"
        table.add_row(key, f"{value:.3f}" if isinstance(value, float) else str(value))
    Console().print(table)
    stderr.print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0


def _write_episodes(episodes: list[Any], out: Path, *, page: bool) -> dict[str, Path]:
    """episodes.jsonl (every trajectory) and, with `page`, report.html showing them (envgym view), linked from
    report.md."""
    paths = {"episodes": out / "episodes.jsonl"}
    paths["episodes"].write_text("".join(e.to_json() + "\n" for e in episodes))
    if page:
        from envgym.view.page import write_page

        paths["page"] = write_page([paths["episodes"]], out / "report.html", title=f"envgym eval: {out.name}")
        with (out / "report.md").open("a") as handle:
            handle.write("\nEvery episode, turn by turn: [report.html](report.html) (envgym view).\n")
    return paths


def register(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate a policy: pass@k, pass^k, attack success, cost; writes a report")
    p.add_argument("env")
    p.add_argument("--policy", default="oracle", choices=POLICIES)
    p.add_argument("--runs", type=positive_int, default=1, help="episodes per task (n for pass@k and pass^k)")
    p.add_argument("--task", action="append", help="task id (repeatable); default: every task")
    p.add_argument("--limit", type=positive_int, default=None,
                   help="only the first N tasks (BFCL: a sample of N per category, drawn with --seed)")
    p.add_argument("--category", action="append",
                   help="BFCL category (repeatable, e.g. multi_turn_base or simple); default: every category")
    p.add_argument("--attacks", nargs="*", default=[], help="'all' or attack ids <goal>/<template>")
    p.add_argument("--attack-runs", type=positive_int, default=1, help="episodes per (task, attack) pair")
    p.add_argument("--guard", choices=["on", "off"], default="on")
    p.add_argument("--confirm", choices=["deny", "user"], default=None, help="default: the world's guard setting")
    p.add_argument("--max-steps", type=positive_int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output folder (default runs/eval/<env>-<policy>)")
    p.add_argument("--report", action="store_true",
                   help="also write report.html, every episode turn by turn (envgym view), linked from report.md")
    add_policy_model_flags(p)
    add_json_flag(p)
    add_env_dir_flag(p)
    p.add_argument("--reward", choices=REWARD_KINDS, default="env",
                   help="score episodes as the trainer would: env, judge or env+judge (reward_mean in the summary)")
    p.add_argument("--judge-model", default="local", help="chat model spec of the judge (--reward judge, env+judge)")
    p.add_argument("--judge-weight", type=float, default=0.5, help="w in (1 - w) * env + w * judge")
    p.set_defaults(func=cmd_eval)
