"""Bearer tokens in files: secrets reach processes through files only other users cannot read, never argv."""

from __future__ import annotations

import os
import secrets
import stat


class TokenFileError(ValueError):
    """A token file that is missing, empty, or readable by others (the message says which and how to fix it)."""


def read_token_file(path: str) -> str:
    """The token in `path`, refusing a file that others can read, or that its group can write or execute.

    Group read is allowed: Kubernetes mounts a Secret as 0440 when the pod sets `fsGroup` (the group is the pod's
    own), so 0600, 0400, 0640 and 0440 pass; 0644 or 0660 do not.
    """
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        with open(path) as fh:
            token = fh.read().strip()
    except OSError as exc:
        raise TokenFileError(f"token file {path}: {exc.strerror}") from exc
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
