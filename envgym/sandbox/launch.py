"""Starts the sandbox server fast: listening first, then the server's imports, without `envgym/__init__`.

    python3 -S -P /path/to/envgym/sandbox/launch.py --socket PATH --token-file FILE ...   (`--help` lists them)

Two things make a cold start slow, and this file avoids both. `python -m envgym.sandbox.server` imports the
`envgym` package first, and with it gymnasium, numpy, the guard and every environment: over a second, for a server
that mostly runs commands. Run by path (`-P` keeps this folder off sys.path), this file puts a bare `envgym`
package in sys.modules whose submodules load as usual, so only the server's own modules are imported. An env
server registers the environments itself on its first session (`EnvHost`), so nothing it serves depends on the
package's __init__.

And a client can only poll for a socket that does not exist yet, sleeping between tries. This file parses the
command line and binds and listens on the socket with the standard library alone, before the server's imports
(pydantic and asyncio: most of what is left of a start). A client's first health request then connects at once
and waits in the kernel's accept queue until the server answers it, the moment it is ready: no poll interval is
added to a start. The server reads (and unlinks) its token before it answers anything.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import socket
import sys
import types
from pathlib import Path

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


def bare_package() -> None:
    """Make `import envgym.<sub>` work without executing envgym/__init__.py (a no-op if envgym is loaded)."""
    if "envgym" in sys.modules:
        return
    folder = Path(__file__).resolve().parents[1]
    package = types.ModuleType("envgym", "envgym, loaded without its __init__ by envgym.sandbox.launch")
    package.__path__ = [str(folder)]
    package.__file__ = str(folder / "__init__.py")
    sys.modules["envgym"] = package
    if str(folder.parent) not in sys.path:
        sys.path.insert(0, str(folder.parent))


if __name__ == "__main__":
    args = parse_args(sys.argv[1:])
    listening = listening_socket(args.socket, args.host, args.port or 0)
    bare_package()
    # Imports only allocate; the collector's passes over them were ~5% of the server's import time.
    gc.disable()
    from envgym.sandbox.server import serve

    gc.enable()
    sys.exit(serve(args, listening))
