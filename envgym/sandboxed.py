"""Worlds that run inside a sandbox: `gym.make("envgym/<name>-v0", sandbox="docker")` (or "kubernetes", "local").

The environment folder is uploaded into the sandbox and its server hosts the `ToolWorldEnv`: world state, tools
(Python ones too) and grading run there, while the agent-facing contract is the one of `ToolWorldEnv`, unchanged.
One seed and one action sequence give the same observations, rewards and `info["state_hash"]` in-process and in
the sandbox. A sandbox can be shared: pass an open `Sandbox` as `sandbox=` and each env opens a session in it (one
container for many worlds and episodes, reset between tasks); a sandbox the env created is closed with it.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envgym.env import ToolWorldEnv
from envgym.registry import env_id
from envgym.world.errors import EnvConfigError

if TYPE_CHECKING:
    from envgym.remote import RemoteEnv
    from envgym.sandbox import Sandbox, SandboxSpec

IN_PROCESS = (None, "none", "in-process")


def folder_tar(folder: Path, name: str) -> bytes:
    """The environment folder as a tar with `name/` at its root (caches and bytecode left out)."""
    import tarfile

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or path.suffix == ".pyc" or not path.is_file():
                continue
            tar.add(path, arcname=f"{name}/{path.relative_to(folder).as_posix()}")
    return buffer.getvalue()


class SandboxedEnv(gym.Env[Any, Any]):
    """A `ToolWorldEnv` of `env_dir` hosted inside a sandbox (see the module docstring)."""

    metadata = {"render_modes": []}  # noqa: RUF012 (gymnasium declares it an instance attribute)

    def __init__(self, env_dir: str | Path, *, sandbox: str | Sandbox = "docker",
                 sandbox_spec: SandboxSpec | None = None, **kwargs: Any):
        # Imported here, not with the module: the registry's entry point lives in this module, and the sandbox
        # client pulls in httpx (with click, rich and pygments) and the remote env asyncio, which an in-process
        # env never uses. Every module imported stays on the heap each full collection of the cycle collector walks.
        from envgym.remote import RemoteEnv
        from envgym.sandbox import SandboxSpec, create_sandbox
        from envgym.sandbox.client import HttpSandbox
        from envgym.sandbox.server_env import WORLDS_DIR

        folder = Path(env_dir).resolve()
        if not folder.is_dir():
            raise EnvConfigError(f"{folder}: no environment folder to run in a sandbox")
        if isinstance(sandbox, str):
            # Worlds read and write only their own state: the smallest box that holds the interpreter will do.
            self.box: Sandbox = create_sandbox(sandbox_spec or SandboxSpec(), backend=sandbox)
            self._owns_box = True
        else:
            self.box, self._owns_box = sandbox, False
        if not isinstance(self.box, HttpSandbox):
            raise EnvConfigError(f"sandbox {self.box!r} does not host environments (no sandbox server)")
        try:
            self.box.put_archive(WORLDS_DIR, folder_tar(folder, folder.name))
            self.remote = RemoteEnv(f"sandbox:{self.box.id}", env_id(folder.name), client=self.box.env_client(),
                                    **kwargs)
        except Exception:
            self.close()
            raise
        self.action_space = self.remote.action_space
        self.observation_space = self.remote.observation_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        return self.remote.reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return self.remote.step(action)

    def close(self) -> None:
        remote: RemoteEnv | None = getattr(self, "remote", None)
        if remote is not None:
            remote.close()
        if self._owns_box:
            self.box.close()


def make_world_env(env_dir: str | Path | None = None, *, sandbox: str | Sandbox | None = None,
                   **kwargs: Any) -> gym.Env[Any, Any]:
    """The registry's entry point: a `ToolWorldEnv`, or with `sandbox=` the same world hosted in a sandbox."""
    if sandbox in IN_PROCESS:
        return ToolWorldEnv(env_dir, **kwargs)
    if env_dir is None:
        raise EnvConfigError("sandbox=: only an environment folder can run in a sandbox")
    return SandboxedEnv(env_dir, sandbox=sandbox, **kwargs)
