"""File and archive operations of the sandbox server, confined to the workspace.

Every path is relative to the workspace: absolute paths and `..` that climb out are refused, and so is any
path that reaches outside through a symbolic link (code in the sandbox can plant links anywhere in the
workspace; on the local backend "outside" is the host). Links that stay inside the workspace are followed.
The checks run against the filesystem just before each use: code in the sandbox could still swap a link in
between, but that code can already touch whatever the server can (same user, same filesystem), so the
guard's job is to keep API callers, who never meant to leave the workspace, inside it.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import stat
import tarfile

from envgym.sandbox.errors import InvalidRequestError, NotFoundError


def _inside(root: str, path: str) -> bool:
    return os.path.commonpath([root, path]) == root


def resolve(workspace: str, path: str, *, what: str = "path") -> str:
    """The absolute path of `path` inside `workspace`, with links resolved; refuses anything outside.

    The final component need not exist (a file about to be written); a link there is resolved too.
    """
    if not path:
        raise InvalidRequestError(f"{what}: expected a non-empty path relative to the workspace")
    if "\x00" in path:  # os.path and open() raise ValueError on NUL: a 500 before this check
        raise InvalidRequestError(f"{what}: {path!r} contains a NUL character")
    if os.path.isabs(path):
        raise InvalidRequestError(f"{what}: {path!r} is absolute; paths are relative to the workspace")
    root = os.path.realpath(workspace)
    lexical = os.path.normpath(os.path.join(root, path))
    if not _inside(root, lexical):
        raise InvalidRequestError(f"{what}: {path!r} climbs out of the workspace")
    real = os.path.realpath(lexical)
    if not _inside(root, real):
        raise InvalidRequestError(f"{what}: {path!r} leads out of the workspace through a symbolic link")
    return real


def read_file(workspace: str, path: str) -> bytes:
    full = resolve(workspace, path)
    try:
        # O_NOFOLLOW: the path was resolved above, so a link here appeared since; refuse it.
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError as exc:
        raise NotFoundError(f"path: no file {path!r} in the sandbox") from exc
    except OSError as exc:
        raise InvalidRequestError(f"path: cannot read {path!r}: {exc.strerror}") from exc
    with os.fdopen(fd, "rb") as fh:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise InvalidRequestError(f"path: {path!r} is a directory; use the archive endpoint")
        return fh.read()


def write_file(workspace: str, path: str, data: bytes, mode: int = 0o644) -> None:
    full = resolve(workspace, path)
    parent = os.path.dirname(full)
    os.makedirs(parent, exist_ok=True)
    if not _inside(os.path.realpath(workspace), os.path.realpath(parent)):
        raise InvalidRequestError(f"path: {path!r} leads out of the workspace through a symbolic link")
    # Write then rename, so a reader never sees half a file. A fresh name opened with O_EXCL: a link
    # planted at a predictable temporary name must not be written through.
    tmp = os.path.join(parent, f".{os.path.basename(full)}.{secrets.token_hex(6)}.envgym-partial")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, full)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def put_archive(workspace: str, dest: str, tar_bytes: bytes) -> None:
    """Extract a tar into `dest`, one member at a time; a member that would land or point outside is refused.

    Checked against the filesystem as extraction goes, so links made by earlier members count: nothing is
    written through a symbolic link, and link members must resolve inside `dest`. Once all are out, every link
    the archive made is checked again (a later member can change where an earlier link leads); one that now
    leads outside is removed and the request fails.
    """
    full = resolve(workspace, dest, what="dest")
    os.makedirs(full, exist_ok=True)
    links: list[tuple[str, str]] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(tar_bytes), mode="r:*") as tar:
            for member in tar:
                target = _check_member(full, member)
                # One by one, checked above: the image's Python (3.11.2) predates extract(filter=...).
                tar.extract(member, full, set_attrs=not member.issym())
                if member.issym():
                    links.append((member.name, target))
    except (tarfile.TarError, OSError) as exc:
        raise InvalidRequestError(f"archive for {dest!r}: {exc}") from exc
    finally:
        # Also when a member was refused: links made before it must not be left leading out.
        escaping = [name for name, target in links if not _inside(full, os.path.realpath(target))]
        for name, target in links:
            if name in escaping:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(target)
    if escaping:
        raise InvalidRequestError(f"archive member {escaping[0]!r} links outside {dest!r} (link chain)")


def _check_member(root: str, member: tarfile.TarInfo) -> str:
    """Where `member` lands under `root`; refuses escapes, writes through links, outward links, devices."""
    if member.isdev() or member.isfifo():
        raise InvalidRequestError(f"archive member {member.name!r} is a device or fifo")
    if os.path.isabs(member.name):
        raise InvalidRequestError(f"archive member {member.name!r} is absolute")
    target = os.path.normpath(os.path.join(root, member.name))
    if target == root or not _inside(root, target):
        raise InvalidRequestError(f"archive member {member.name!r} would land outside the destination")
    # Every directory on the way must be a real directory inside root, not a link (the archive's or not).
    walk = root
    for part in os.path.relpath(target, root).split(os.sep)[:-1]:
        walk = os.path.join(walk, part)
        if os.path.islink(walk):
            raise InvalidRequestError(f"archive member {member.name!r} would be written through a link")
    if os.path.islink(target) or (os.path.exists(target) and not os.path.isdir(target)):
        if member.isdir():
            raise InvalidRequestError(f"archive member {member.name!r} replaces a file with a directory")
        os.unlink(target)  # tarfile would otherwise write through an existing link
    if member.issym() or member.islnk():
        base = os.path.dirname(target) if member.issym() else root
        if os.path.isabs(member.linkname):
            raise InvalidRequestError(f"archive member {member.name!r} is an absolute link")
        link = os.path.realpath(os.path.join(base, member.linkname))
        if not _inside(root, link):
            raise InvalidRequestError(f"archive member {member.name!r} links outside the destination")
    return target


def get_archive(workspace: str, src: str) -> bytes:
    """A tar (uncompressed) of `src`, a file or a directory, with paths relative to its parent.

    Links inside are stored as links, never followed.
    """
    full = resolve(workspace, src, what="src")
    if not os.path.lexists(full):
        raise NotFoundError(f"src: nothing at {src!r} in the sandbox")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(full, arcname=os.path.basename(os.path.normpath(src)) or ".")
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
