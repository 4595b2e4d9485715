"""`envgym train CONFIG`: GRPO on an envgym environment from a YAML GRPOConfig."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from envgym.cli.common import CliError, add_json_flag, print_json, stderr


def _set_overrides(items: list[str]) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise CliError(f"--set {item!r}: the value is not YAML: {exc}") from None
    return overrides


def cmd_recipe(args: argparse.Namespace) -> int:
    """`envgym train RECIPE.yaml`: a whole experiment (synthesized env, warm start, GRPO, held-out evaluation)."""
    from envgym.train.recipe import Recipe, run_recipe

    try:
        recipe = Recipe.from_yaml(args.config, _set_overrides(args.set))
    except (ValueError, yaml.YAMLError) as exc:
        raise CliError(str(exc)) from None
    try:
        report = run_recipe(recipe, console=stderr, resume=args.resume, warm_start_from=args.warm_start_from)
    except ValueError as exc:  # the recipe asks for what cannot be made (too few tasks, bad GRPO fields)
        raise CliError(str(exc)) from None
    summary = {"output_dir": str(Path(recipe.grpo.get("output_dir", f"runs/{recipe.name}"))),
               "paired": report["paired"], "grpo": report["grpo"], "wall_s": report["wall_s"]}
    if args.json:
        print_json(summary)
    else:
        Console().print_json(json.dumps(summary, default=str))
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from envgym.sandbox.malloc import keep_freed_memory
    from envgym.train import GRPOConfig, GRPOTrainer, distributed

    keep_freed_memory()  # rollouts and updates come in waves of the same size: no wave re-faults the last one's pages
    if args.config and Path(args.config).exists():
        from envgym.train.recipe import is_recipe

        if is_recipe(args.config):
            return cmd_recipe(args)
    overrides: dict[str, Any] = {key: value for key, value in (
        ("generation", args.generation), ("server_url", args.server_url), ("server_kind", args.server_kind)
    ) if value is not None}
    overrides.update(_set_overrides(args.set))
    try:
        config = GRPOConfig.from_yaml(args.config) if args.config else GRPOConfig()
        if overrides:
            config = GRPOConfig.from_dict({**config.to_dict(), **overrides}, source="--set")
    except (ValueError, yaml.YAMLError) as exc:
        # GRPOConfig's errors name the file or --set and the field: the user's input, not a bug.
        raise CliError(str(exc)) from None
    try:
        distributed.init_from_env()  # under torchrun: join the process group; rank 0 writes (envgym.train.distributed)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    trainer = GRPOTrainer(config, console=stderr)
    before = trainer.evaluate() if args.evaluate else None
    rows = trainer.train()
    after = trainer.evaluate() if args.evaluate else None
    summary = {
        "output_dir": config.output_dir,
        "steps": trainer.step,
        "last": rows[-1] if rows else None,
        "heldout_before": before,
        "heldout_after": after,
    }
    if not distributed.is_main():
        return 0
    if args.json:
        print_json(summary)
    else:
        Console().print_json(json.dumps(summary, default=str))
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("train", help="train a policy with GRPO on an environment")
    parser.add_argument("config", nargs="?", help="YAML file of GRPOConfig fields (defaults when omitted), or a "
                        "recipe (a file with a `grpo:` section; see envgym/train/recipe.py and examples/)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one GRPOConfig field (YAML value), e.g. --set max_steps=10; in a recipe a dotted "
        "key, e.g. --set grpo.seed=1 --set minutes=5",
    )
    parser.add_argument("--resume", action="store_true",
                        help="recipes: go on from what a killed run left in its output folder (report, checkpoint)")
    parser.add_argument("--warm-start-from", metavar="DIR",
                        help="recipes: take the warm start and its evaluation (b) from another seed's run of the "
                        "same recipe in DIR instead of redoing them (its report.json and warm_start.pt)")
    parser.add_argument("--evaluate", action="store_true", help="greedy held-out success before and after")
    parser.add_argument("--generation", choices=["local", "server"],
                        help="sample in-process (local) or on an inference server (server; needs --server-url)")
    parser.add_argument("--server-url", help="base URL of the inference server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--server-kind", choices=["transformers", "vllm", "sglang"],
                        help="the server's wire format (default: transformers, i.e. `transformers serve`)")
    add_json_flag(parser)
    parser.set_defaults(func=cmd_train)
