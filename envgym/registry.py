"""Finding environment folders and registering them with Gymnasium as `envgym/<name>-v0`."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import gymnasium as gym

ENTRY_POINT = "envgym.sandboxed:make_world_env"  # ToolWorldEnv, or the same world in a sandbox (sandbox=...)
NAMESPACE = "envgym"


def register_remote() -> None:
    """Register `envgym/remote-v0` (`envgym.remote.RemoteEnv`, imported when one is made) with gymnasium
    (idempotent)."""
    if "envgym/remote-v0" not in gym.registry:
        gym.register("envgym/remote-v0", entry_point="envgym.remote:RemoteEnv", disable_env_checker=True)


class UnknownEnvironmentError(KeyError):
    """A name that is not a registered environment; the message lists the registered ones."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown environment"


def bundled_dir() -> Path:
    """The bundled suite: `environments/` in a source checkout, `envgym/environments/` in an installed wheel."""
    package = Path(__file__).resolve().parent
    for candidate in (package / "environments", package.parent / "environments"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled environments not found next to {package}")


def env_dirs(root: str | Path) -> list[Path]:
    """Environment folders directly under `root` (those holding a world file), sorted by name."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(errno.ENOENT, "no such folder of environments", str(root))
    return sorted(
        p
        for p in root.iterdir()
        if p.is_dir() and any((p / n).exists() for n in ("world.yaml", "world.json"))
    )


def env_id(name: str) -> str:
    return f"{NAMESPACE}/{name}-v0"


def register_dir(root: str | Path, *, override: bool = False) -> list[str]:
    """Register every environment folder under `root`; returns the ids. `gym.make(id)` then works on each."""
    ids = []
    for path in env_dirs(root):
        eid = env_id(path.name)
        if eid in gym.registry and not override:
            ids.append(eid)
            continue
        gym.register(
            id=eid, entry_point=ENTRY_POINT, kwargs={"env_dir": str(path)}, disable_env_checker=False
        )
        ids.append(eid)
    return ids


# Environments that are not folders: id -> (entry point, what `envgym list` says of it). Made by gymnasium only
# when asked for, so their packages (bfcl-eval) are imported then.
BUILTIN = {
    "envgym/bfcl-multi-turn-v0": ("envgym.integrations.bfcl.multi_turn:BfclMultiTurnEnv",
                                  "BFCL multi-turn: its 8 backends, graded by its multi-turn checker (800 tasks)"),
    "envgym/bfcl-v0": ("envgym.integrations.bfcl.single_turn:BfclEnv",
                       "BFCL single-turn: simple, multiple, parallel, live, irrelevance; its AST checker"),
}


def register_bundled() -> list[str]:
    """Register the bundled suite, the built-in environments (BUILTIN) and every folder in $ENVGYM_ENV_DIRS
    (os.pathsep-separated)."""
    for eid, (entry_point, _) in BUILTIN.items():
        if eid not in gym.registry:
            gym.register(id=eid, entry_point=entry_point, disable_env_checker=False)
    ids = register_dir(bundled_dir())
    for extra in filter(None, os.environ.get("ENVGYM_ENV_DIRS", "").split(os.pathsep)):
        ids += register_dir(extra)
    return ids


def registered_ids() -> list[str]:
    return sorted(i for i in gym.registry if i.startswith(f"{NAMESPACE}/"))


def resolve_id(name: str) -> str:
    """The registered id of a short name (`retail`) or id (`envgym/retail-v0`); unknown names raise."""
    eid = name if "/" in name else env_id(name)
    if eid not in gym.registry:
        raise UnknownEnvironmentError(f"unknown environment {name!r}; registered: {', '.join(registered_ids())}")
    return eid


def find_env_dir(name: str) -> Path:
    """The folder of a registered environment by short name (`retail`) or id (`envgym/retail-v0`)."""
    eid = resolve_id(name)
    kwargs = gym.registry[eid].kwargs or {}
    if "env_dir" not in kwargs:
        raise UnknownEnvironmentError(f"{eid} is not a folder-backed environment")
    return Path(kwargs["env_dir"])
