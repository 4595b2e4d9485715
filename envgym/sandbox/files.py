"""File and archive operations of the sandbox server. Relative paths resolve against the workspace."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile

from envgym.sandbox.errors import InvalidRequestError, NotFoundError


def resolve(workspace: str, path: str) -> str:
    if not path:
        raise InvalidRequestError("path: expected a non-empty file path")
    return os.path.normpath(os.path.join(workspace, path))


def read_file(workspace: str, path: str) -> bytes:
    full = resolve(workspace, path)
    try:
        with open(full, "rb") as fh:
            return fh.read()
    except FileNotFoundError as exc:
        raise NotFoundError(f"path: no file {path!r} in the sandbox") from exc
    except IsADirectoryError as exc:
        raise InvalidRequestError(f"path: {path!r} is a directory; use the archive endpoint") from exc


def write_file(workspace: str, path: str, data: bytes, mode: int = 0o644) -> None:
    full = resolve(workspace, path)
    os.makedirs(os.path.dirname(full) or "/", exist_ok=True)
    tmp = f"{full}.envgym-partial"
    # Write then rename, so a reader never sees half a file.
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, full)


def put_archive(workspace: str, dest: str, tar_bytes: bytes) -> None:
    """Extract a tar into `dest`; members that would land outside `dest` are refused."""
    full = resolve(workspace, dest)
    os.makedirs(full, exist_ok=True)
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as tar:
            members = tar.getmembers()
            for member in members:
                _check_member(full, member)
            # Checked above by hand: the image's Python (3.11.2) predates extractall(filter=...).
            tar.extractall(full, members=members)
    except (tarfile.TarError, OSError) as exc:
        raise InvalidRequestError(f"archive for {dest!r}: {exc}") from exc


def _check_member(root: str, member: tarfile.TarInfo) -> None:
    """Refuse members that would escape `root`: absolute or `..` paths, outward links, devices."""
    target = os.path.realpath(os.path.join(root, member.name))
    if os.path.commonpath([root, target]) != root:
        raise InvalidRequestError(f"archive member {member.name!r} would land outside {root!r}")
    if member.issym() or member.islnk():
        base = os.path.dirname(target) if member.issym() else root
        link = os.path.realpath(os.path.join(base, member.linkname))
        if os.path.commonpath([root, link]) != root:
            raise InvalidRequestError(f"archive member {member.name!r} links outside {root!r}")
    if member.isdev():
        raise InvalidRequestError(f"archive member {member.name!r} is a device file")


def get_archive(workspace: str, src: str) -> bytes:
    """A tar (uncompressed) of `src`, a file or a directory, with paths relative to its parent."""
    full = resolve(workspace, src)
    if not os.path.exists(full):
        raise NotFoundError(f"src: nothing at {src!r} in the sandbox")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(full, arcname=os.path.basename(full.rstrip("/")) or ".")
    return buf.getvalue()


def wipe(directory: str) -> None:
    """Remove everything inside `directory`, keeping the directory itself."""
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
