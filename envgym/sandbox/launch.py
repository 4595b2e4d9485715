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

import gc
import importlib.util
import sys
import types
from pathlib import Path


def load_listen() -> types.ModuleType:
    """envgym/sandbox/listen.py loaded by path (it imports only the standard library) and registered under its
    module name, so the server's own `from envgym.sandbox.listen import ...` finds this copy."""
    path = Path(__file__).resolve().with_name("listen.py")
    spec = importlib.util.spec_from_file_location("envgym.sandbox.listen", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["envgym.sandbox.listen"] = module
    return module


_PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """Mark this process non-dumpable (prctl PR_SET_DUMPABLE 0); returns whether the kernel took it.

    Commands in a sandbox run as the server's own user, and a same-user process may read another's
    /proc/<pid>/mem (the token, every answer) or ptrace it. A non-dumpable process's /proc files belong to root and
    ptrace needs CAP_SYS_PTRACE, which sandboxes drop. Commands get the flag back at execve, so they are unaffected.
    Linux only; elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


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
    make_undumpable()  # first: before the token is read or any answer is made
    listen = load_listen()
    args = listen.parse_args(sys.argv[1:])
    listening = listen.listening_socket(args.socket, args.host, args.port or 0)
    bare_package()
    # Imports only allocate; the collector's passes over them were ~5% of the server's import time.
    gc.disable()
    from envgym.sandbox.server import serve

    gc.enable()
    sys.exit(serve(args, listening))
