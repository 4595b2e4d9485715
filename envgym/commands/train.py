"""`envgym train CONFIG`: GRPO on an envgym environment from a YAML GRPOConfig."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console


def cmd_train(args: argparse.Namespace) -> int:
    from envgym.train import GRPOConfig, GRPOTrainer

    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: expected KEY=VALUE")
        import yaml

        overrides[key] = yaml.safe_load(value)
    config = GRPOConfig.from_yaml(args.config) if args.config else GRPOConfig()
    if overrides:
        config = GRPOConfig.from_dict({**config.to_dict(), **overrides}, source="--set")
    trainer = GRPOTrainer(config, console=Console(stderr=True))
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
    if args.json:
        print(json.dumps(summary, default=str))
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
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object")
    parser.set_defaults(func=cmd_train)
