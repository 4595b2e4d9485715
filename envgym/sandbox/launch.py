"""Starts the sandbox server without running `envgym/__init__`, which imports and registers every environment.

    python3 -P /path/to/envgym/sandbox/launch.py --socket PATH --token-file FILE ...   (the arguments of server.py)

`python -m envgym.sandbox.server` imports the `envgym` package first, and with it gymnasium, numpy, the guard and
every environment: over a second of a sandbox's cold start, for a server that mostly runs commands. Run by path
(`-P` keeps this folder off sys.path), this file puts a bare `envgym` package in sys.modules whose submodules load
as usual, so only the server's own modules are imported. An env server registers the environments itself on its
first session (`EnvHost`), so nothing it serves depends on the package's __init__.
"""

import sys
import types
from pathlib import Path


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
    bare_package()
    from envgym.sandbox.server import main

    sys.exit(main())
