"""What every command shares: the JSON printer, the stderr console, common flags, and which errors are the user's."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from gymnasium.error import UnregisteredEnv
from rich.console import Console

from envgym.deploy import RenderError
from envgym.registry import UnknownEnvironmentError, register_dir
from envgym.world.spec import SpecError

stderr = Console(stderr=True)
"""Progress, notes and tables meant for people; stdout stays for results (YAML, JSON)."""


class CliError(Exception):
    """A problem with what the user asked for (a flag value, a file, a name); the message says which."""


# Raised by the library when the input the user named is wrong, not when the code is: these print one line and
# exit 2. Anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    CliError,
    SpecError,
    UnknownEnvironmentError,
    UnregisteredEnv,
    RenderError,
    FileNotFoundError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)


def error_line(exc: BaseException) -> str:
    """The exception's message on one line (SpecError lists each invalid field on its own line)."""
    text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    if isinstance(exc, OSError) and exc.filename is not None:
        text = f"{exc.filename}: {exc.strerror or text}"
    parts = [p.strip() for p in str(text).splitlines() if p.strip()]
    return "; ".join(parts) or type(exc).__name__


def print_json(obj: Mapping[str, Any]) -> None:
    """The one JSON object a command prints with --json: a single line on stdout."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def add_json_flag(parser: Any) -> None:
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (episodes, steps, runs)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def add_env_dir_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env-dir", action="append", default=[], metavar="FOLDER",
        help="also register the environment folders under FOLDER. An environment folder is code: its tools.py "
        "and hooks run when an environment is made, so only pass folders you trust, as you would a Python package",
    )


def register_env_dirs(args: argparse.Namespace) -> None:
    """Register the folders of --env-dir; this reads folder names only and runs none of their code."""
    for folder in args.env_dir:
        register_dir(folder)


def add_policy_model_flags(parser: argparse.ArgumentParser) -> None:
    """Where the local/openai policies' model lives and how it samples (run and eval)."""
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible server (policy openai)")
    parser.add_argument("--model", default=None, help="model name on that server")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--max-tokens", type=positive_int, default=256)
