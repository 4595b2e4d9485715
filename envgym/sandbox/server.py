"""The sandbox server's entry point: build the HTTP front for a service, serve until stopped.

Run inside a sandbox as `python3 -S -P .../envgym/sandbox/launch.py --socket PATH --token-file FILE ...` (or
`--port P`), which listens before it imports this module, or as `python -m envgym.sandbox.server ...`. It exits
by itself when its ttl passes or it has been idle too long. With `--env-id` it is an env server: health, env
sessions and shutdown only, no exec, files or archives. Framing and limits live in
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
from envgym.sandbox.listen import listening_socket, parse_args
from envgym.sandbox.process import ExecDefaults, become_subreaper
from envgym.sandbox.router import Router
from envgym.sandbox.server_env import WORLDS_DIR, EnvHost
from envgym.sandbox.service import SandboxService


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
    return HttpServer(listening_socket(socket_path, host, port), Router(service, token), limits)


@contextlib.contextmanager
def stop_on_signals(service: SandboxService) -> Iterator[list[str]]:
    """SIGINT and SIGTERM stop `service`, whatever dispositions this process inherited.

    A process started from a non-interactive shell's background job (CI runners, `nohup`, `&`) inherits SIGINT as
    *ignored*, and Python then installs no KeyboardInterrupt handler: relying on the default made `envgym serve`
    deaf to SIGINT under CI. Handlers are installed explicitly (main thread only) and restored on exit; the yielded
    list receives the name of each signal, and the caller's loop stops on it (`serve_until_stopped` polls it).

    The handler only appends: it must take no lock. It runs in the main thread between two bytecodes, and the main
    thread spends its life in `service.stopped.wait()`, which holds that event's lock around its waits; a handler that
    called `stopped.set()` there waited on a lock its own thread held, forever (an `envgym serve` worker was found so,
    SIGTERMed when its front died and never exiting).
    """
    received: list[str] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return

    def handle(signum: int, _frame: object) -> None:
        received.append(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def serve_until_stopped(service: SandboxService, server: HttpServer, poll_s: float = 0.25,
                        parent: int | None = None) -> str:
    """Serve until the service is stopped (also by SIGINT/SIGTERM), its ttl passes or it idles out, or, with
    `parent`, this process's parent is no longer that pid (it exited: a worker whose front died by a signal its
    death signal did not reach stops within `poll_s`).

    Returns the reason it stopped.
    """
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    reason = "shutdown"
    with stop_on_signals(service) as received:
        while not received and not service.stopped.wait(poll_s):
            expired = service.expired()
            if expired is not None:
                reason = expired
                break
            if parent is not None and os.getppid() != parent:
                reason = "parent exited"
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


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return serve(args, listening_socket(args.socket, args.host, args.port or 0))


def serve(args: argparse.Namespace, listening: socket.socket) -> int:
    """Serve on `listening` (see envgym.sandbox.launch, which binds it before this module is imported)."""
    import resource

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
    server = HttpServer(listening, Router(service, token), limits)
    where = args.socket or f"http://{args.host}:{server.server_address[1]}"
    print(f"envgym sandbox server {service.sandbox_id} on {where}", file=sys.stderr, flush=True)
    reason = serve_until_stopped(service, server)
    print(f"envgym sandbox server {service.sandbox_id} stopped: {reason}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
