"""The sandbox server's entry point: build the HTTP front for a service, serve until stopped.

Run inside a sandbox as `python -m envgym.sandbox.server --socket PATH --token-file FILE ...`
(or `--port P`). It exits by itself when its ttl passes or it has been idle too long. With `--env-id` it is an
env server: health, env sessions and shutdown only, no exec, files or archives. Framing and limits live in
`envgym.sandbox.httpd` and `envgym.sandbox.limits`, routes in `envgym.sandbox.router`; only the standard library
is used for HTTP, so it runs in the minimal sandbox image.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import socket
import sys
import threading
from collections.abc import Iterator

from envgym.sandbox.httpd import HttpServer
from envgym.sandbox.limits import ENV_SERVER_LIMITS, SANDBOX_LIMITS, ServerLimits
from envgym.sandbox.process import ExecDefaults, become_subreaper
from envgym.sandbox.router import Router
from envgym.sandbox.server_env import WORLDS_DIR, EnvHost
from envgym.sandbox.service import SandboxService

# The kernel's queue of connections not yet accepted; the event loop accepts them quickly.
_LISTEN_BACKLOG = 1024


def make_http_server(
    service: SandboxService,
    *,
    token: str | None,
    socket_path: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ServerLimits = SANDBOX_LIMITS,
) -> HttpServer:
    """An HTTP server for `service` on a Unix socket (`socket_path`) or TCP (`host`, `port`), bound and listening."""
    if socket_path is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(socket_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(socket_path)
    else:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    sock.listen(_LISTEN_BACKLOG)
    return HttpServer(sock, Router(service, token), limits)


@contextlib.contextmanager
def stop_on_signals(service: SandboxService) -> Iterator[list[str]]:
    """SIGINT and SIGTERM stop `service`, whatever dispositions this process inherited.

    A process started from a non-interactive shell's background job (CI runners, `nohup`, `&`) inherits SIGINT as
    *ignored*, and Python then installs no KeyboardInterrupt handler: relying on the default made `envgym serve`
    deaf to SIGINT under CI. Handlers are installed explicitly (main thread only) and restored on exit; the yielded
    list receives the name of the signal that stopped the service.
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handle(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)
        service.stopped.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_stopped(service: SandboxService, server: HttpServer, poll_s: float = 0.25) -> str:
    """Serve until the service is stopped (also by SIGINT/SIGTERM), its ttl passes or it idles out.

    Returns the reason it stopped.
    """
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    reason = "shutdown"
    with stop_on_signals(service) as received:
        while not service.stopped.wait(poll_s):
            expired = service.expired()
            if expired is not None:
                reason = expired
                break
            if service.env_host is not None:
                service.env_host.reap_idle()
            if service.exec_enabled:
                service.processes.reap_orphans()
    if received:
        reason = received[0]
    service.shutdown()
    server.shutdown()
    server.server_close()
    return reason


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m envgym.sandbox.server", description=__doc__)
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", help="listen on this Unix socket path")
    where.add_argument("--port", type=int, help="listen on this TCP port")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--token-file", help="file holding the bearer token (else $ENVGYM_SANDBOX_TOKEN)")
    p.add_argument("--sandbox-id", default=None)
    p.add_argument("--workspace", required=True)
    p.add_argument("--scratch", action="append", default=[], help="directory wiped on reset (repeatable)")
    p.add_argument("--ttl", type=float, default=None)
    p.add_argument("--idle", type=float, default=None)
    p.add_argument("--timeout", type=float, default=60.0, help="default command timeout (s)")
    p.add_argument("--max-output", type=int, default=1 << 20)
    p.add_argument("--rlimits", default="{}", help='JSON {"RLIMIT_AS": bytes, ...} applied to commands')
    p.add_argument("--command-env", default="{}", help="JSON object of environment variables for commands")
    p.add_argument(
        "--env-id", default=None, help="serve only this gymnasium environment: no exec, files or archives"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    import resource

    args = _parse_args(argv)
    become_subreaper()
    token = os.environ.pop("ENVGYM_SANDBOX_TOKEN", None)
    if args.token_file:
        with open(args.token_file) as fh:
            token = fh.read().strip()
        # Commands in the sandbox run as the same user; once read, the token must not stay readable.
        os.unlink(args.token_file)
    rlimits = {getattr(resource, name): int(value) for name, value in json.loads(args.rlimits).items()}
    service = SandboxService(
        args.sandbox_id or secrets.token_hex(6),
        ExecDefaults(args.workspace, args.timeout, args.max_output, json.loads(args.command_env), rlimits),
        ttl_s=args.ttl,
        idle_s=args.idle,
        env_host=EnvHost(args.env_id, worlds_dir=None if args.env_id else os.path.join(args.workspace, WORLDS_DIR)),
        # An env server's clients all hold its token; none of them may get a shell.
        exec_enabled=args.env_id is None,
        scratch=tuple(args.scratch),
    )
    limits = SANDBOX_LIMITS if args.env_id is None else ENV_SERVER_LIMITS
    server = make_http_server(
        service, token=token, socket_path=args.socket, host=args.host, port=args.port or 0, limits=limits
    )
    where = args.socket or f"http://{args.host}:{server.server_address[1]}"
    print(f"envgym sandbox server {service.sandbox_id} on {where}", file=sys.stderr, flush=True)
    reason = serve_until_stopped(service, server)
    print(f"envgym sandbox server {service.sandbox_id} stopped: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
