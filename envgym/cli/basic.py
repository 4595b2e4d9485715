"""`envgym list | show | schema | generate | run`: browse environments and run policies on them."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import gymnasium as gym
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
from envgym.loader import load_environment, read_environment
from envgym.registry import BUILTIN, env_id, find_env_dir, registered_ids, resolve_id
from envgym.world import load_module
from envgym.world.files import dump_tasks, format_json_schema


def cmd_list(args: argparse.Namespace) -> int:
    register_env_dirs(args)
    rows: list[dict[str, Any]] = []
    for eid in registered_ids():
        kwargs = gym.registry[eid].kwargs or {}
        if "env_dir" not in kwargs:
            description = BUILTIN[eid][1] if eid in BUILTIN else "remote environment"
            rows.append({"id": eid, "tasks": None, "tools": None, "description": description})
            continue
        world, tasks = read_environment(kwargs["env_dir"])
        rows.append({"id": eid, "tasks": len(tasks), "tools": len(world.tools), "description": world.description})
    if args.json:
        print_json({"environments": rows})
        return 0
    table = Table("id", "tasks", "tools", "description")
    for r in rows:
        table.add_row(r["id"], str(r["tasks"] or ""), str(r["tools"] or ""), (r["description"] or "")[:70])
    Console().print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from envgym.world import generate_state

    register_env_dirs(args)
    directory = find_env_dir(args.env)
    world, tasks = read_environment(directory)
    summary = {
        "id": env_id(world.name),
        "description": world.description,
        "directory": str(directory),
        "entities": {n: len(t) for n, t in generate_state(world).tables.items()},
        "tools": [{"name": t.name, "labels": t.labels, "description": t.description} for t in world.tools],
        "tasks": len(tasks),
        "policy": world.policy,
    }
    if args.json:
        print_json(summary)
        return 0
    out = Console()
    out.print(f"[bold]{summary['id']}[/bold]  {world.description}")
    out.print(f"entities: {summary['entities']}   tasks: {len(tasks)}")
    table = Table("tool", "labels", "description")
    for t in world.tools:
        table.add_row(t.name, ",".join(t.labels), t.description[:80])
    out.print(table)
    out.print("[bold]policy[/bold]\n" + world.policy)
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    print_json(format_json_schema())  # JSON either way: --json is accepted so every command takes it
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    """Regenerate an environment's tasks.jsonl with its deterministic generator (generate.py)."""
    register_env_dirs(args)
    directory = find_env_dir(args.env)
    if not (directory / "generate.py").is_file():
        raise CliError(f"{directory}: no generate.py, so its tasks cannot be regenerated")
    generator = load_module(directory, "generate")
    data = load_environment(str(directory))
    tasks = generator.generate_tasks(data)
    for task in tasks:
        data.target_state(task)  # every reference solution must replay cleanly
    dump_tasks(tasks, directory / "tasks.jsonl")
    if args.json:
        print_json({"env": resolve_id(args.env), "tasks": len(tasks), "path": str(directory / "tasks.jsonl")})
    else:
        stderr.print(f"wrote {len(tasks)} tasks to {directory / 'tasks.jsonl'}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from envgym.cli.progress import episode_bar
    from envgym.play.episode import run_episodes
    from envgym.play.make import make_policy

    register_env_dirs(args)
    kwargs: dict[str, Any] = {}
    if args.max_steps:
        kwargs["max_steps"] = args.max_steps
    env = gym.make(resolve_id(args.env), **kwargs)
    data = getattr(env.unwrapped, "data", None)
    if args.task and data is not None:
        known = {t.id for t in data.tasks}
        unknown = [t for t in args.task if t not in known]
        if unknown:
            raise CliError(f"{args.env}: no task {unknown[0]!r} (it has {len(known)} tasks)")
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
    if not args.json and not args.quiet:
        _print_transcripts(trajs[: args.show], data)
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
        print_json(summary)
    else:
        table = Table("metric", "value")
        for k, v in summary.items():
            table.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
        Console().print(table)
    return 0


def _print_transcripts(trajectories: list[Any], data: Any) -> None:
    """Each episode turn by turn, then why it got its reward (envgym.view): what `envgym run` shows first."""
    from envgym.view.explain import explain
    from envgym.view.records import record_from_trajectory
    from envgym.view.terminal import print_transcript

    console = Console()
    for i, trajectory in enumerate(trajectories):
        record = record_from_trajectory(trajectory)
        title = f"episode {i + 1}/{len(trajectories)} · " if len(trajectories) > 1 else ""
        print_transcript(console, record, explain(record, data), title=title)


def register(sub: Any) -> None:
    p = sub.add_parser("list", help="list registered environments (reads their files, runs none of their code)")
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="describe one environment (reads its files, runs none of its code)")
    p.add_argument("env")
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("schema", help="print the JSON Schema of the world and task file format")
    add_json_flag(p)
    p.set_defaults(func=cmd_schema)

    p = sub.add_parser("generate", help="regenerate an environment's tasks.jsonl from its generate.py")
    p.add_argument("env")
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("run", help="run a policy on an environment")
    p.add_argument("env")
    p.add_argument("--policy", default="oracle", choices=["oracle", "random", "refuse", "local", "openai"])
    p.add_argument("--episodes", type=positive_int, default=1)
    p.add_argument("--task", action="append", help="task id (repeatable); default: drawn by seed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=positive_int, default=None)
    p.add_argument("--out", default=None, help="append trajectories to this JSONL file (envgym view shows them)")
    p.add_argument("--show", type=int, default=1, metavar="N",
                   help="print the transcripts of the first N episodes (default 1; 0 for none)")
    p.add_argument("--quiet", action="store_true", help="print the summary table only, no transcript")
    add_policy_model_flags(p)
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_run)
