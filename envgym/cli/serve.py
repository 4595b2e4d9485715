"""`envgym serve ENV --port P`: serve one environment over HTTP to many concurrent RemoteEnv clients.

Clients authenticate with a bearer token read from a file: `--token-file PATH` (mode 0600), or else a fresh token
written to a new 0600 file whose path is printed. `--no-auth` is accepted on loopback hosts only. `--workers N`
spreads sessions over N worker processes (one per core), see `envgym.sandbox.workers`.
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import sys
import tempfile
from dataclasses import replace

import gymnasium as gym

from envgym.cli.common import CliError, add_json_flag, print_json
from envgym.sandbox.heap import HeapKeeper
from envgym.sandbox.limits import ENV_SERVER_LIMITS, SessionLimits
from envgym.sandbox.malloc import keep_large_blocks_mapped
from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.server_env import EnvHost, EnvSessions
from envgym.sandbox.service import SandboxService
from envgym.sandbox.tokens import TokenFileError, read_token_file, write_new_token
from envgym.sandbox.workers import WorkerHost, front_pid, start_workers


def resolve_env_id(name: str) -> str:
    """`retail` -> `envgym/retail-v0`; ids with a `/` or `:` (e.g. `module:Env-v0`) pass through."""
    return name if ("/" in name or ":" in name) else f"envgym/{name}-v0"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve an environment over HTTP (many sessions)")
    p.add_argument("env", help="environment name (retail) or gymnasium id (envgym/retail-v0)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    auth = p.add_mutually_exclusive_group()
    auth.add_argument(
        "--token-file", default=None, help="file (mode 0600) holding the bearer token clients must send"
    )
    auth.add_argument("--no-auth", action="store_true", help="accept clients without a token (loopback only)")
    p.add_argument("--session-idle", type=float, default=600.0, help="close sessions idle this long (s)")
    p.add_argument(
        "--max-sessions",
        type=int,
        default=None,
        help="sessions at once, all workers together (default: what half the available memory holds, see "
        "envgym.sandbox.limits.SessionLimits)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections each process accepts (default: what its file descriptor limit and memory allow, "
        "see envgym.sandbox.limits.ServerLimits)",
    )
    p.add_argument(
        "--workers", type=int, default=1, help="worker processes holding the sessions (one per core; 1: this one)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=ENV_SERVER_LIMITS.handler_threads,
        help="requests each process runs at once (its handler threads)",
    )
    p.add_argument("--session-prefix", default="", help=argparse.SUPPRESS)  # set by the front for its workers
    add_json_flag(p)  # one object once it listens: {"env": id, "url": ...}
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    env_id = resolve_env_id(args.env)
    gym.spec(env_id)  # an unknown id fails here, as a user error, not in every client's first session
    if args.no_auth and not is_loopback(args.host):
        raise CliError(f"--no-auth is refused on {args.host}: it is not a loopback address")
    keep_large_blocks_mapped()  # megabyte bodies must not ratchet a long-running server's heap up
    with tempfile.TemporaryDirectory(prefix="envgym-serve-") as private:
        try:
            token_file = None if args.no_auth else (args.token_file or write_new_token(private))
            token = read_token_file(token_file) if token_file else None
        except TokenFileError as exc:
            raise CliError(str(exc)) from None
        if args.threads < 1:
            raise CliError(f"--threads: expected at least 1, got {args.threads}")
        for flag, value in (("--max-sessions", args.max_sessions), ("--max-connections", args.max_connections)):
            if value is not None and value < 1:
                raise CliError(f"{flag}: expected at least 1, got {value}")
        limits = replace(ENV_SERVER_LIMITS, handler_threads=args.threads, max_connections=args.max_connections)
        sessions = _sessions(args, env_id, token_file, token)
        # An env server offers env routes only: no exec, files, archives, nor a shutdown any client could call.
        service = SandboxService(
            f"serve-{secrets.token_hex(4)}",
            ExecDefaults(private),
            env_host=sessions,
            exec_enabled=False,
            remote_shutdown=False,
        )
        if isinstance(sessions, WorkerHost):
            sessions.on_exit = lambda why: _stop(service, why)
        try:
            server = make_http_server(
                service, token=token, host=args.host, port=args.port, limits=limits
            )
        except BaseException:
            sessions.close_all()
            raise
        budgets = {"max_connections": server.max_connections, "max_sessions": _session_budget(args)}
        print(
            f"envgym serve: budgets: {budgets['max_connections']} connections per process, "
            f"{budgets['max_sessions']} sessions",
            file=sys.stderr,
            flush=True,
        )
        port = server.server_address[1]
        auth = f"(token file: {token_file})" if token_file else "(no auth)"
        print(f"envgym serve: {env_id} on http://{args.host}:{port} {auth}", file=sys.stderr, flush=True)
        if args.json:
            print_json({"env": env_id, "url": f"http://{args.host}:{port}", "token_file": token_file, **budgets})
        reason = serve_until_stopped(service, server, parent=front_pid())
        print(f"envgym serve: stopped ({reason})", file=sys.stderr, flush=True)
    return 0


def _sessions(args: argparse.Namespace, env_id: str, token_file: str | None, token: str | None) -> EnvSessions:
    if args.workers < 1:
        raise CliError(f"--workers: expected at least 1, got {args.workers}")
    total = _session_budget(args)
    if args.workers == 1:
        return EnvHost(
            env_id,
            idle_s=args.session_idle,
            max_sessions=total,
            session_prefix=args.session_prefix,
            heap=HeapKeeper(),
        )
    share = -(-total // args.workers)
    options = ["--session-idle", str(args.session_idle), "--max-sessions", str(share), "--threads", str(args.threads)]
    if args.max_connections is not None:
        options += ["--max-connections", str(args.max_connections)]
    try:
        workers = start_workers(
            env_id, args.workers, host=args.host, token_file=token_file, token=token, options=options
        )
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    return WorkerHost(workers)


def _session_budget(args: argparse.Namespace) -> int:
    """--max-sessions, or what memory holds; worked out once, when the front starts (kept on `args`)."""
    if args.max_sessions is None:
        args.max_sessions = SessionLimits().session_budget()
    return int(args.max_sessions)


def _stop(service: SandboxService, why: str) -> None:
    print(f"envgym serve: {why}; stopping", file=sys.stderr, flush=True)
    service.stopped.set()
