"""`envgym eval bfcl-multi-turn|bfcl ...`: accuracy per BFCL category with 95% intervals, as BFCL's tables give it."""

from __future__ import annotations

import argparse
from pathlib import Path

import gymnasium as gym
from rich.console import Console
from rich.table import Table

from envgym.cli.common import CliError, print_json, stderr
from envgym.cli.progress import episode_bar
from envgym.integrations.bfcl import MULTI_TURN_ID, data
from envgym.integrations.bfcl.evaluate import choose_tasks, evaluate
from envgym.integrations.bfcl.oracle import BfclOraclePolicy
from envgym.play.make import make_policy
from envgym.play.policies import Policy
from envgym.world.errors import EnvConfigError


def _policy(args: argparse.Namespace) -> Policy:
    if args.policy == "oracle":
        return BfclOraclePolicy()
    if args.policy == "attacker":
        raise CliError("--policy attacker: BFCL environments have no attack suite")
    return make_policy(args.policy, seed=args.seed, base_url=args.base_url, model=args.model,
                       temperature=args.temperature, max_tokens=args.max_tokens)


def cmd_eval_bfcl(args: argparse.Namespace, env_id: str) -> int:
    """Run `args.policy` on each chosen category of BFCL environment `env_id` and print the per-category table."""
    choices = data.MULTI_TURN_CATEGORIES if env_id == MULTI_TURN_ID else data.SINGLE_TURN_CATEGORIES
    try:
        categories = [data.resolve_category(c, choices) for c in (args.category or choices)]
        env = gym.make(env_id, max_steps=args.max_steps)
    except EnvConfigError as exc:
        raise CliError(str(exc)) from None
    if args.task:
        raise CliError("--task: BFCL evaluation runs whole categories; use --category and --limit")
    total = sum(len(choose_tasks(c, args.limit, args.seed)[0]) for c in categories)
    # The local model is loaded once; a scripted policy is built per episode (it keeps the episode's plan).
    shared = None if args.policy in ("oracle", "random", "refuse") else _policy(args)
    with episode_bar(f"eval {env_id}", total, enabled=not args.json) as on_episode:
        table, trajectories = evaluate(env, env_id, lambda: shared or _policy(args), args.policy, categories,
                                       limit=args.limit, seed=args.seed, on_episode=on_episode)
    env.close()
    out = Path(args.out or f"runs/eval/{env_id.split('/')[-1]}-{args.policy}")
    paths = table.write(out, trajectories)
    if args.json:
        print_json({"env": env_id, "policy": args.policy, "overall": table.overall, "categories": table.rows(),
                    "files": {k: str(v) for k, v in paths.items()}})
        return 0
    grid = Table("category", "entries", "valid", "accuracy", "95% interval")
    for row in table.rows():
        low, high = row["ci95"]
        grid.add_row(row["category"], str(row["n"]), str(row["correct"]), f"{100 * row['accuracy']:.1f}%",
                     f"{100 * low:.1f}-{100 * high:.1f}%")
    grid.add_row("overall (unweighted mean)", "", "", f"{100 * table.overall:.1f}%", "")
    Console().print(grid)
    stderr.print(f"wrote {', '.join(str(p) for p in paths.values())}")
    return 0
