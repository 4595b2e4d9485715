"""`envgym train CONFIG`: GRPO on an envgym environment from a YAML GRPOConfig."""

from __future__ import annotations

import argparse
import json
from typing import Any

import yaml
from rich.console import Console

from envgym.cli.common import CliError, add_json_flag, print_json, stderr


def cmd_train(args: argparse.Namespace) -> int:
    from envgym.train import GRPOConfig, GRPOTrainer, distributed

    overrides: dict[str, Any] = {key: value for key, value in (
        ("generation", args.generation), ("server_url", args.server_url), ("server_kind", args.server_kind)
    ) if value is not None}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--set {item!r}: expected KEY=VALUE")
        try:
            overrides[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise CliError(f"--set {item!r}: the value is not YAML: {exc}") from None
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
    parser.add_argument("config", nargs="?", help="YAML file of GRPOConfig fields (defaults when omitted)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one GRPOConfig field (YAML value), e.g. --set max_steps=10",
    )
    parser.add_argument("--evaluate", action="store_true", help="greedy held-out success before and after")
    parser.add_argument("--generation", choices=["local", "server"],
                        help="sample in-process (local) or on an inference server (server; needs --server-url)")
    parser.add_argument("--server-url", help="base URL of the inference server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--server-kind", choices=["transformers", "vllm", "sglang"],
                        help="the server's wire format (default: transformers, i.e. `transformers serve`)")
    add_json_flag(parser)
    parser.set_defaults(func=cmd_train)
