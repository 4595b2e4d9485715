"""The files and archive endpoints keep every path inside the workspace, links included."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from envgym.sandbox import SandboxSpec, files
from envgym.sandbox.errors import InvalidRequestError
from envgym.sandbox.local import LocalBackend


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


@pytest.fixture()
def outside(tmp_path: Path) -> Path:
    """A host directory next to the workspace, with a file that must stay untouched and unread."""
    out = tmp_path / "host"
    out.mkdir()
    (out / "secret.txt").write_text("host secret")
    return out


def _tar(*members: tuple[str, str, str]) -> bytes:
    """(name, kind, payload) with kind "file" (payload is the content), "sym" or "dir"."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, kind, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload.encode()))
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            else:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
    return buf.getvalue()


@pytest.mark.parametrize("path", ["../host/secret.txt", "a/../../host/secret.txt", "/etc/passwd"])
def test_paths_that_leave_the_workspace_are_refused(workspace: Path, outside: Path, path: str) -> None:
    with pytest.raises(InvalidRequestError, match="path"):
        files.read_file(str(workspace), path)
    with pytest.raises(InvalidRequestError, match="path"):
        files.write_file(str(workspace), path, b"evil")
    with pytest.raises(InvalidRequestError, match="src"):
        files.get_archive(str(workspace), path)
    assert (outside / "secret.txt").read_text() == "host secret"


def test_a_link_planted_in_the_workspace_does_not_lead_out(workspace: Path, outside: Path) -> None:
    (workspace / "out").symlink_to(outside)
    (workspace / "grade.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(InvalidRequestError, match="symbolic link"):
        files.read_file(str(workspace), "grade.txt")
    with pytest.raises(InvalidRequestError, match="symbolic link"):
        files.write_file(str(workspace), "out/new.txt", b"evil")
    with pytest.raises(InvalidRequestError, match="symbolic link"):
        files.write_file(str(workspace), "grade.txt", b"evil")
    with pytest.raises(InvalidRequestError, match="symbolic link"):
        files.get_archive(str(workspace), "out")
    with pytest.raises(InvalidRequestError, match="symbolic link"):
        files.put_archive(str(workspace), "out", _tar(("x.txt", "file", "evil")))
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_text() == "host secret"


def test_links_that_stay_inside_the_workspace_are_followed(workspace: Path) -> None:
    (workspace / "real").mkdir()
    (workspace / "real" / "f.txt").write_text("inside")
    (workspace / "alias").symlink_to("real")
    assert files.read_file(str(workspace), "alias/f.txt") == b"inside"
    files.write_file(str(workspace), "alias/g.txt", b"new")
    assert (workspace / "real" / "g.txt").read_bytes() == b"new"


def test_a_link_at_the_temporary_name_is_not_written_through(workspace: Path, outside: Path) -> None:
    # The old write went through `<path>.envgym-partial`, a name sandbox code could predict and plant.
    (workspace / "solution.py.envgym-partial").symlink_to(outside / "secret.txt")
    files.write_file(str(workspace), "solution.py", b"print(1)\n")
    assert (workspace / "solution.py").read_bytes() == b"print(1)\n"
    assert (outside / "secret.txt").read_text() == "host secret"


def test_an_archive_link_chain_cannot_carry_a_member_out(workspace: Path, outside: Path) -> None:
    # q -> r/.. looks inside while r does not exist; r -> . then makes q mean the parent of the destination.
    (workspace / "dest").mkdir()
    chain = _tar(("q", "sym", "r/.."), ("r", "sym", "."), ("q/host/pwned.txt", "file", "evil"))
    with pytest.raises(InvalidRequestError, match="archive member"):
        files.put_archive(str(workspace), "dest", chain)
    assert not (workspace / "host").exists() and sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert not any(
        not os.path.realpath(p).startswith(str(workspace / "dest")) for p in (workspace / "dest").iterdir()
    ), "a link leading out of the destination was left behind"


def test_an_archive_link_chain_alone_is_refused_and_removed(workspace: Path) -> None:
    with pytest.raises(InvalidRequestError, match="link chain"):
        files.put_archive(str(workspace), "dest", _tar(("q", "sym", "r/.."), ("r", "sym", ".")))
    assert not (workspace / "dest" / "q").is_symlink()


@pytest.mark.parametrize(
    "members",
    [
        (("../x.txt", "file", "evil"),),
        (("/abs.txt", "file", "evil"),),
        (("l", "sym", "/etc"),),
        (("l", "sym", "../.."),),
    ],
)
def test_archive_members_that_land_or_point_outside_are_refused(
    workspace: Path, members: tuple[tuple[str, str, str], ...]
) -> None:
    with pytest.raises(InvalidRequestError, match="archive member"):
        files.put_archive(str(workspace), "dest", _tar(*members))


def test_an_archive_with_inside_links_round_trips(workspace: Path) -> None:
    files.put_archive(
        str(workspace),
        "proj",
        _tar(
            ("pkg", "dir", ""),
            ("pkg/a.py", "file", "A = 1\n"),
            ("bin", "dir", ""),
            ("bin/a", "sym", "../pkg/a.py"),
        ),
    )
    assert files.read_file(str(workspace), "proj/bin/a") == b"A = 1\n"
    with tarfile.open(fileobj=io.BytesIO(files.get_archive(str(workspace), "proj")), mode="r") as tar:
        assert tar.getmember("proj/bin/a").linkname == "../pkg/a.py"


def test_the_http_endpoints_refuse_escapes_on_the_local_backend(outside: Path) -> None:
    with LocalBackend().create(SandboxSpec(ttl_s=60)) as box:
        with pytest.raises(InvalidRequestError, match="climbs out"):
            box.read_file("../../../../../../" + str(outside / "secret.txt").lstrip("/"))
        with pytest.raises(InvalidRequestError, match="absolute"):
            box.write_file(str(outside / "pwned.txt"), b"evil")
        box.exec(f"ln -s {outside} out")
        with pytest.raises(InvalidRequestError, match="symbolic link"):
            box.get_archive("out")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
