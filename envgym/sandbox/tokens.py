"""Bearer tokens in files: secrets reach processes through files only other users cannot read, never argv."""

from __future__ import annotations

import errno
import os
import secrets
import stat


class TokenFileError(ValueError):
    """A token file that is missing, empty, or readable by others (the message says which and how to fix it)."""


def read_token_file(path: str) -> str:
    """The token in `path`, refusing a file that others can read, or that its group can write or execute, a file
    owned by another user (root excepted: mounted Secrets are root's), and a symbolic link.

    Group read is allowed: Kubernetes mounts a Secret as 0440 when the pod sets `fsGroup` (the group is the pod's
    own), so 0600, 0400, 0640 and 0440 pass; 0644 or 0660 do not. The file is opened once (O_NOFOLLOW) and the
    checks are made on that descriptor (fstat), so it cannot be swapped between a check and the read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise TokenFileError(f"token file {path}: a symbolic link; name the file itself") from exc
        raise TokenFileError(f"token file {path}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        info = os.fstat(fh.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(f"token file {path}: not a regular file")
        if info.st_uid not in (os.getuid(), 0):
            raise TokenFileError(
                f"token file {path}: owned by uid {info.st_uid}, not by this user (uid {os.getuid()}) or root; "
                "another user could have written it"
            )
        token = fh.read(1 << 16).decode("utf-8", errors="replace").strip()
    mode = stat.S_IMODE(info.st_mode)
    if mode & 0o037:
        raise TokenFileError(
            f"token file {path}: mode {mode:04o} lets other users read or change the token; run `chmod 600 {path}`"
        )
    if not token:
        raise TokenFileError(f"token file {path}: the file is empty")
    return token


def write_new_token(directory: str) -> str:
    """Create `directory/token` (mode 0600) holding a fresh random token; returns the file's path."""
    path = os.path.join(directory, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_urlsafe(32) + "\n")
    return path
