"""An environment folder: the files it must hold, and the Python modules in it that its world names.

A folder is code, like a Python package: `python: module:function` tools, hooks and attack suites import
`<folder>/<module>.py`. Only such files can be named (no dotted, absolute or `..` names, no symlink out of the
folder), and each file is imported once per resolved path, so two folders with the same name never share code.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from envgym.world.spec import SpecError

REQUIRED_FILES = ("world.yaml", "tasks.jsonl", "policy.md", "README.md")
"""Every bundled environment folder holds these; tools.py, generate.py and hook modules are optional."""

_MODULE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Modules that have run to the end, by their sys.modules name. A module is put here only once its code has finished,
# under _LOADING: environments made on many threads at once used to pick up a module still running (its functions
# not yet defined) from sys.modules. Reentrant: a folder module may load another one of its folder while it runs.
_LOADED: dict[str, ModuleType] = {}
_LOADING = threading.RLock()


def load_module(folder: str | Path, module: str) -> ModuleType:
    """Import `<folder>/<module>.py` once per resolved file; anything outside the folder is a SpecError.

    Safe from many threads at once: each caller gets the module only after its code has run to the end, and the
    code runs once (a module that raised is not kept: the next call runs it again and raises again, or loads it).
    """
    if not _MODULE.fullmatch(module):
        raise SpecError(
            f"{folder}: python module {module!r} must be the plain name of a .py file in the environment "
            f"folder (no dots, slashes, '..' or absolute paths)"
        )
    root = Path(folder).resolve()
    path = (root / f"{module}.py").resolve()
    if path.parent != root or not path.is_file():
        raise SpecError(f"{root}: python module {module!r}: no file {module}.py inside the environment folder")
    # Keyed by the resolved path, not the folder's name: two folders called `shop` are different code.
    name = f"envgym_env_{hashlib.sha256(str(path).encode()).hexdigest()[:16]}_{module}"
    loaded = _LOADED.get(name)
    if loaded is not None:
        return loaded
    with _LOADING:
        loaded = _LOADED.get(name)
        if loaded is not None:  # another thread finished it while this one waited
            return loaded
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise SpecError(f"{path}: cannot be imported as a Python module")
        loaded = importlib.util.module_from_spec(spec)
        # In sys.modules while it runs, as importlib does (dataclasses and pickling look a class's module up
        # there), but handed to other callers only through _LOADED, once it has run to the end.
        sys.modules[name] = loaded
        try:
            spec.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[name]
            raise
        _LOADED[name] = loaded
    return loaded


def resolve_python(folder: Path | None, ref: str) -> Callable[..., Any]:
    """The function a `module:function` reference names.

    With a folder (a world loaded from files) the module is a file in that folder and nothing else. Without
    one (a world built in code) the module is any importable dotted name: the caller is already running code.
    """
    module, _, func = ref.partition(":")
    where = folder if folder is not None else "world built in code"
    if not module or not _MODULE.fullmatch(func):
        raise SpecError(f"{where}: python reference {ref!r} must look like 'module:function'")
    loaded = load_module(folder, module) if folder is not None else importlib.import_module(module)
    fn: Callable[..., Any] | None = getattr(loaded, func, None)
    if not callable(fn):
        raise SpecError(f"{where}: python reference {ref!r}: module {module!r} has no function {func!r}")
    return fn
