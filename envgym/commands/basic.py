"""`envgym list | show | schema | generate | run`: browse environments and run policies on them."""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from typing import Any

import gymnasium as gym
from rich.console import Console
from rich.table import Table

from envgym.loader import load_environment
from envgym.registry import env_id, find_env_dir, register_dir, registered_ids
from envgym.world.spec import dump_tasks, format_json_schema

console = Console(stderr=True)


def _print_json(obj: Any) -> None:
    print(json.dumps(obj, ensure_ascii=False, default=str))


def _add_env_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--env-dir", action="append", default=[], help="also register environments under this folder"
    )


def _register_extra(args: argparse.Namespace) -> None:
    for d in args.env_dir:
        register_dir(d)


def cmd_list(args: argparse.Namespace) -> int:
    _register_extra(args)
    rows: list[dict[str, Any]] = []
    for eid in registered_ids():
        kwargs = gym.registry[eid].kwargs or {}
        if "env_dir" not in kwargs:
            rows.append({"id": eid, "tasks": None, "tools": None, "description": "remote environment"})
            continue
        data = load_environment(kwargs["env_dir"])
        rows.append(
            {
                "id": eid,
                "tasks": len(data.tasks),
                "tools": len(data.world.tools),
                "description": data.world.description,
            }
        )
    if args.json:
        _print_json({"environments": rows})
        return 0
    table = Table("id", "tasks", "tools", "description")
    for r in rows:
        table.add_row(r["id"], str(r["tasks"] or ""), str(r["tools"] or ""), (r["description"] or "")[:70])
    Console().print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    _register_extra(args)
    data = load_environment(str(find_env_dir(args.env)))
    summary = {
        "id": env_id(data.name),
        "description": data.world.description,
        "directory": str(data.directory),
        "entities": {n: len(t) for n, t in data.initial.tables.items()},
        "tools": [
            {"name": t.name, "labels": t.labels, "description": t.description} for t in data.world.tools
        ],
        "tasks": len(data.tasks),
        "policy": data.world.policy,
    }
    if args.json:
        _print_json(summary)
        return 0
    out = Console()
    out.print(f"[bold]{summary['id']}[/bold]  {data.world.description}")
    out.print(f"entities: {summary['entities']}   tasks: {len(data.tasks)}")
    table = Table("tool", "labels", "description")
    for t in data.world.tools:
        table.add_row(t.name, ",".join(t.labels), t.description[:80])
    out.print(table)
    out.print("[bold]policy[/bold]\n" + data.world.policy)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    _print_json(format_json_schema())
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Regenerate an environment's tasks.jsonl with its deterministic generator (generate.py)."""
    _register_extra(args)
    directory = find_env_dir(args.env)
    spec = importlib.util.spec_from_file_location(f"envgym_gen_{directory.name}", directory / "generate.py")
    if spec is None or spec.loader is None:
        raise SystemExit(f"{directory}: no generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = load_environment(str(directory))
    tasks = module.generate_tasks(data)
    for task in tasks:
        data.target_state(task)  # every reference solution must replay cleanly
    dump_tasks(tasks, directory / "tasks.jsonl")
    console.print(f"wrote {len(tasks)} tasks to {directory / 'tasks.jsonl'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from envgym.cli_progress import episode_bar
    from envgym.play.episode import run_episodes
    from envgym.play.make import make_policy

    _register_extra(args)
    kwargs: dict[str, Any] = {}
    if args.max_steps:
        kwargs["max_steps"] = args.max_steps
    env = gym.make(args.env if "/" in args.env else env_id(args.env), **kwargs)
    policy = make_policy(
        args.policy,
        seed=args.seed,
        base_url=args.base_url,
        model=args.model,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
    )
    task_ids = args.task or None
    with episode_bar("episodes", args.episodes, enabled=not args.json) as on_episode:
        trajs = run_episodes(env, policy, args.episodes, seed=args.seed, task_ids=task_ids, out=args.out,
                             on_episode=on_episode)
    env.close()
    rewards = [t.reward for t in trajs]
    summary = {
        "env": args.env,
        "policy": args.policy,
        "episodes": len(trajs),
        "mean_reward": statistics.fmean(rewards) if rewards else 0.0,
        "success_rate": sum(r >= 1.0 for r in rewards) / len(rewards) if rewards else 0.0,
        "mean_steps": statistics.fmean(t.steps for t in trajs) if trajs else 0.0,
        "tool_errors": sum(len(t.tool_errors) for t in trajs),
        "wall_s": sum(t.wall_s for t in trajs),
        "out": args.out,
    }
    if args.json:
        _print_json(summary)
    else:
        table = Table("metric", "value")
        for k, v in summary.items():
            table.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
        Console().print(table)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered environments")
    p.add_argument("--json", action="store_true")
    _add_env_dir(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="describe one environment")
    p.add_argument("env")
    p.add_argument("--json", action="store_true")
    _add_env_dir(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("schema", help="print the JSON Schema of the world and task file format")
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("generate", help="regenerate an environment's tasks.jsonl from its generate.py")
    p.add_argument("env")
    _add_env_dir(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("run", help="run a policy on an environment")
    p.add_argument("env")
    p.add_argument("--policy", default="oracle", choices=["oracle", "random", "refuse", "local", "openai"])
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--task", action="append", help="task id (repeatable); default: drawn by seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--out", default=None, help="append trajectories to this JSONL file")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server (policy openai)")
    p.add_argument("--model", default=None, help="model name on that server")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--json", action="store_true", help="print one JSON summary object")
    _add_env_dir(p)
    p.set_defaults(func=cmd_run)
