"""The `envgym` command: one parser, one JSON printer (`output.print_json`) and one error path.

Each area's subcommands live in a module of this package with `register(subparsers)`. A user error (unknown
environment, bad file, bad flag value, missing file) prints one line naming the problem to stderr and exits 2;
only a bug prints a traceback. Progress bars and tables are drawn here, never in the library.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from envgym.cli.common import USER_ERRORS, error_line

# The command modules of this package, in help order; each defines `register(subparsers)`.
COMMAND_MODULES = ("basic", "eval", "view", "synth", "train", "optimize", "serve", "mcp", "sandbox", "k8s", "model")


class Parser(argparse.ArgumentParser):
    """argparse, but a bad flag is one line on stderr (no usage block), like every other user error."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="envgym", description="Tool-using environments for training LLM agents.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        print(f"envgym {args.command}: error: {error_line(exc)}", file=sys.stderr)
        return 2
