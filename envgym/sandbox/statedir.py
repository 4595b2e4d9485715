"""The host folders where sandbox backends keep per-sandbox state: private to one user, checked on every use.

A shared, predictable folder (the old `/tmp/envgym-sandboxes`) let any local user create it first and then move a
sandbox's socket folder aside and listen on its `server.sock`, receiving the bearer token and forging answers; a
`meta.json` planted there made the reaper kill a process of the planter's choosing. So the root is per user
(`$ENVGYM_SANDBOX_DIR`, else `$XDG_RUNTIME_DIR/envgym-sandboxes`, else `/tmp/envgym-sandboxes-<uid>`), created 0700,
and refused unless it is a real directory (not a link) owned by the current user with no access for anyone else.
Clients then reach a socket through a descriptor of its folder (`SocketDir`), never by path again, so renaming
folders after the start leads nowhere.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from envgym.sandbox.errors import SandboxError


class StateDirError(SandboxError):
    """A host state folder that another user could have planted or can change (the message says how to fix it)."""

    type_name = "StateDir"


def default_root() -> Path:
    """The per-user root: `$ENVGYM_SANDBOX_DIR`, else `$XDG_RUNTIME_DIR/envgym-sandboxes`, else a per-uid /tmp name."""
    configured = os.environ.get("ENVGYM_SANDBOX_DIR")
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "envgym-sandboxes"
    return Path(f"/tmp/envgym-sandboxes-{os.getuid()}")


def check_private_dir(path: Path) -> None:
    """Raise StateDirError unless `path` is a directory (not a link) owned by this user with mode 0700 or tighter."""
    try:
        info = os.lstat(path)
    except OSError as exc:
        raise StateDirError(f"{path}: {exc.strerror}") from exc
    if not stat.S_ISDIR(info.st_mode):
        raise StateDirError(f"{path}: not a directory (a link or a file); remove it or set ENVGYM_SANDBOX_DIR")
    if info.st_uid != os.getuid():
        raise StateDirError(
            f"{path}: owned by uid {info.st_uid}, not by this user (uid {os.getuid()}); another user may have "
            "created it: remove it or set ENVGYM_SANDBOX_DIR to a folder of your own"
        )
    if info.st_mode & 0o077:
        raise StateDirError(
            f"{path}: mode {stat.S_IMODE(info.st_mode):04o} lets other users in; run `chmod 700 {path}`"
        )


def private_dir(path: Path) -> Path:
    """`path` created (with missing parents) mode 0700, then checked with `check_private_dir`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private_dir(path)
    return path


def state_dir(backend: str) -> Path:
    """Where `backend` keeps per-sandbox host state: `<root>/<backend>`, both private to this user (checked)."""
    root = private_dir(default_root())
    return private_dir(root / backend)


class SocketDir:
    """A socket folder held open by descriptor: `socket_path` reaches `server.sock` in this very folder.

    The path goes through `/proc/self/fd/<n>`, so a folder moved aside and replaced after the start is never
    connected to, however often the client reconnects. `close` releases the descriptor (idempotent).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

    @property
    def socket_path(self) -> str:
        if self._fd is None:
            raise StateDirError(f"{self.folder}: the socket folder was released")
        return f"/proc/self/fd/{self._fd}/server.sock"

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)
