"""`envgym serve ENV --port P`: serve one environment over HTTP to many concurrent RemoteEnv clients."""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile

from envgym.sandbox.process import ExecDefaults
from envgym.sandbox.server import make_http_server, serve_until_stopped
from envgym.sandbox.server_env import EnvHost
from envgym.sandbox.service import SandboxService


def resolve_env_id(name: str) -> str:
    """`retail` -> `envgym/retail-v0`; ids with a `/` or `:` (e.g. `module:Env-v0`) pass through."""
    return name if ("/" in name or ":" in name) else f"envgym/{name}-v0"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve", help="serve an environment over HTTP (many sessions)")
    p.add_argument("env", help="environment name (retail) or gymnasium id (envgym/retail-v0)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--token", default=None, help="require this bearer token from clients")
    p.add_argument("--session-idle", type=float, default=600.0, help="close sessions idle this long (s)")
    p.add_argument("--max-sessions", type=int, default=4096)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    env_id = resolve_env_id(args.env)
    host = EnvHost(env_id, idle_s=args.session_idle, max_sessions=args.max_sessions)
    with tempfile.TemporaryDirectory(prefix="envgym-serve-") as workspace:
        # An env server runs no commands (exec_enabled=False); the workspace only fills the service's shape.
        service = SandboxService(
            f"serve-{secrets.token_hex(4)}", ExecDefaults(workspace), env_host=host, exec_enabled=False
        )
        server = make_http_server(service, token=args.token, host=args.host, port=args.port)
        port = server.server_address[1]  # type: ignore[index]
        print(f"envgym serve: {env_id} on http://{args.host}:{port}", file=sys.stderr, flush=True)
        reason = serve_until_stopped(service, server)
        print(f"envgym serve: stopped ({reason})", file=sys.stderr, flush=True)
    return 0
