"""`envgym view FILE.jsonl... [--out report.html]`: one self-contained HTML page of the episodes in trajectory files."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from envgym.cli.common import CliError, add_env_dir_flag, add_json_flag, print_json, register_env_dirs, stderr
from envgym.view.page import write_page
from envgym.view.records import RecordError


def cmd_view(args: argparse.Namespace) -> int:
    register_env_dirs(args)
    out = Path(args.out) if args.out else Path(args.files[0]).with_suffix(".html")
    try:
        path = write_page(args.files, out, title=args.title)
    except RecordError as exc:
        raise CliError(str(exc)) from None
    if args.json:
        print_json({"page": str(path), "files": args.files})
    else:
        stderr.print(f"wrote {path} (open it in a browser: file://{path.resolve()})")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("view", help="write one HTML page (no network needed) showing the episodes of trajectory "
                       "files from run --out, eval, synth rollouts")
    p.add_argument("files", nargs="+", metavar="FILE.jsonl")
    p.add_argument("--out", default=None, help="the page to write (default: the first file with .html)")
    p.add_argument("--title", default=None)
    add_json_flag(p)
    add_env_dir_flag(p)
    p.set_defaults(func=cmd_view)
