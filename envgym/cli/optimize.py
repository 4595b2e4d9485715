"""`envgym optimize ENV`: reflective system-prompt search (GEPA) or playbook learning (ACE, `--playbook`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from envgym.cli.common import (
    CliError,
    add_env_dir_flag,
    add_json_flag,
    positive_int,
    print_json,
    register_env_dirs,
)
from envgym.cli.common import stderr as console
from envgym.env import ToolWorldEnv
from envgym.llm import CachedChatModel, ChatModel, load_chat_model
from envgym.loader import load_environment
from envgym.optimize import OptimizeConfig, Optimizer, Reflector, split_tasks
from envgym.optimize.report import write_result
from envgym.registry import find_env_dir


def _model(kind: str, args: argparse.Namespace) -> ChatModel:
    if kind == "local":
        model = load_chat_model("local")
    else:
        if not args.model:
            raise CliError(f"--llm/--policy {kind} needs --model (the model name on the server)")
        model = load_chat_model(f"openai:{args.model}", base_url=args.base_url)
    return CachedChatModel(model, args.cache, mode=args.cache_mode) if args.cache else model


def _on_event(event: dict[str, Any]) -> None:
    kind = event["event"]
    if kind == "episode":
        console.print(f"  {event['candidate']} on {event['task']}: reward {event['reward']:.2f}")
    elif kind in ("accepted", "rejected", "not_better", "skipped", "proposed", "done"):
        detail = {k: v for k, v in event.items() if k not in ("event", "critique", "ops")}
        console.print(f"[bold]{kind}[/bold] {detail}")


def cmd_optimize(args: argparse.Namespace) -> int:
    register_env_dirs(args)
    data = load_environment(str(find_env_dir(args.env)))
    config = OptimizeConfig(train_tasks=args.train_tasks, heldout_tasks=args.heldout_tasks,
                            iterations=args.iterations, minibatch=args.minibatch, merge_every=args.merge_every,
                            playbook=args.playbook, seed=args.seed)
    try:  # the user's numbers, checked before a model loads
        split_tasks([t.id for t in data.tasks], config.train_tasks, config.heldout_tasks, config.seed)
        if config.minibatch > config.train_tasks:
            raise ValueError(f"--minibatch {config.minibatch} is larger than --train-tasks {config.train_tasks}")
    except ValueError as exc:
        raise CliError(f"{args.env}: {exc}") from None
    env = ToolWorldEnv(data=data, max_steps=args.max_steps)
    reflector_model = _model(args.llm, args)
    policy_model = reflector_model if (args.policy or args.llm) == args.llm else _model(args.policy, args)
    reflector = Reflector(reflector_model, playbook=args.playbook, max_tokens=args.reflect_max_tokens)
    optimizer = Optimizer(env, policy_model, reflector, config, max_tokens=args.max_tokens,
                          on_event=None if args.json else _on_event)
    seed_prompt = env.reset(seed=0)[1]["messages"][0]["content"]
    result = optimizer.run(seed_prompt)
    out = Path(args.out or f"runs/optimize/{data.name}")
    command = "envgym " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["optimize"] else None
    paths = write_result(result, out, command)
    summary = {"env": data.name, "best": result.best, "front": result.front, "candidates": len(result.candidates),
               "heldout_before": f"{sum(result.heldout_before)}/{len(result.heldout_before)}",
               "heldout_after": f"{sum(result.heldout_after)}/{len(result.heldout_after)}",
               "files": {k: str(v) for k, v in paths.items()}}
    if args.json:
        print_json(summary)
    else:
        console.print(summary)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("optimize", help="optimize the system prompt (GEPA) or a playbook (ACE) by reflection")
    p.add_argument("env")
    p.add_argument("--llm", choices=["local", "openai"], default="local", help="the reflector model")
    p.add_argument("--policy", choices=["local", "openai"], default=None, help="the acting model (default: --llm)")
    p.add_argument("--model", default=None, help="model name on the OpenAI-compatible server")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible server")
    p.add_argument("--playbook", action="store_true", help="ACE: learn an itemized playbook, not a whole prompt")
    p.add_argument("--iterations", type=positive_int, default=3)
    p.add_argument("--minibatch", type=positive_int, default=2, help="training tasks per iteration")
    p.add_argument("--train-tasks", type=positive_int, default=4)
    p.add_argument("--heldout-tasks", type=positive_int, default=4, help="disjoint from the training tasks")
    p.add_argument("--merge-every", type=int, default=0, help="merge two front candidates every N iterations")
    p.add_argument("--max-steps", type=positive_int, default=None)
    p.add_argument("--max-tokens", type=positive_int, default=128, help="token cap of one agent turn")
    p.add_argument("--reflect-max-tokens", type=positive_int, default=384)
    p.add_argument("--cache", default=None, help="record/replay every model call in this JSONL file")
    p.add_argument("--cache-mode", choices=["auto", "record", "replay"], default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="output folder (default runs/optimize/<env>)")
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_optimize)
