"""`envgym sandbox ...`: build the sandbox image, list and reap sandboxes."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.table import Table

from envgym.cli.common import add_json_flag, print_json
from envgym.sandbox import BACKENDS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("sandbox", help="sandbox image and lifecycle")
    sub = p.add_subparsers(dest="sandbox_command", required=True, metavar="ACTION")

    build = sub.add_parser(
        "build-image", help="build the sandbox image offline (debootstrap + docker import)"
    )
    build.add_argument("--rebuild", action="store_true", help="rebuild the base layer too")
    add_json_flag(build)
    build.set_defaults(func=_build_image)

    reap = sub.add_parser("reap", help="remove expired and orphaned sandboxes")
    reap.add_argument(
        "--backend", action="append", choices=sorted(BACKENDS), help="default: local and docker"
    )
    reap.add_argument("--run-id", default=None, help="also remove every sandbox of this run")
    reap.add_argument("--no-orphans", action="store_true", help="keep sandboxes whose owner process died")
    add_json_flag(reap)
    reap.set_defaults(func=_reap)


def _build_image(args: argparse.Namespace) -> int:
    import docker

    from envgym.sandbox.image import ensure_image, image_summary

    client = docker.from_env(timeout=600)
    tag = ensure_image(client, rebuild=args.rebuild, quiet=args.json)
    summary = image_summary(client, tag)
    if args.json:
        print_json(summary)
    else:
        Console().print(f"sandbox image {summary['tag']} ({summary['size_mb']} MB) is ready")
    return 0


def _reap(args: argparse.Namespace) -> int:
    from envgym.sandbox.reaper import reap

    backends = tuple(args.backend or ("local", "docker"))
    report = reap(backends, run_id=args.run_id, orphans=not args.no_orphans)
    if args.json:
        print_json(report)
        return 0
    table = Table("backend", "removed")
    for name, removed in report.items():
        table.add_row(name, removed if isinstance(removed, str) else (", ".join(removed) or "nothing"))
    Console().print(table)
    return 0
