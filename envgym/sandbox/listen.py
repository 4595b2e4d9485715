"""The sandbox server's command line and listening socket, with the standard library alone.

`envgym.sandbox.launch` loads this file by path and binds the socket before any envgym module is imported;
`envgym.sandbox.server` imports it as usual. It imports nothing from envgym, so neither depends on the other
through it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket

# The kernel's queue of connections not yet accepted; the event loop accepts them quickly.
LISTEN_BACKLOG = 1024


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The server's command line (see envgym.sandbox.server)."""
    p = argparse.ArgumentParser(prog="envgym sandbox server", description="The in-sandbox HTTP server.")
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


def listening_socket(socket_path: str | None = None, host: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A socket bound and listening on the Unix socket `socket_path`, or else on TCP (`host`, `port`)."""
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
    sock.listen(LISTEN_BACKLOG)
    return sock
