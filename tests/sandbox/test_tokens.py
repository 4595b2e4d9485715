"""Token files: what modes are accepted, and that errors name the file and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from envgym.sandbox.tokens import TokenFileError, read_token_file, write_new_token


@pytest.mark.parametrize("mode", [0o600, 0o400, 0o640, 0o440])
def test_owner_only_and_group_read_modes_are_accepted(tmp_path: Path, mode: int) -> None:
    # 0440/0640: a Kubernetes Secret mounted in a pod that sets fsGroup.
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(mode)
    assert read_token_file(str(path)) == "s3cret"


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o660, 0o620, 0o666])
def test_modes_that_let_others_read_or_change_the_token_are_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "token"
    path.write_text("s3cret\n")
    path.chmod(mode)
    with pytest.raises(TokenFileError, match=rf"{path}: mode {mode:04o}.*chmod 600") as err:
        read_token_file(str(path))
    assert "s3cret" not in str(err.value)


def test_an_empty_or_missing_file_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    empty.chmod(0o600)
    with pytest.raises(TokenFileError, match="empty"):
        read_token_file(str(empty))
    with pytest.raises(TokenFileError, match=str(tmp_path / "missing")):
        read_token_file(str(tmp_path / "missing"))


def test_a_new_token_file_is_private_and_readable(tmp_path: Path) -> None:
    path = write_new_token(str(tmp_path))
    assert Path(path).stat().st_mode & 0o777 == 0o600
    assert len(read_token_file(path)) >= 32
