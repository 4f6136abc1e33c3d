"""models/private_files.py: secrets and state files are 0600 from the start, and whole."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.private_files import make_private, read_or_create_secret, write_private


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_umask() -> Iterator[None]:
    """Umask 0, so a file created without an explicit mode would be world-readable."""
    old = os.umask(0)
    yield
    os.umask(old)


def test_write_private_creates_0600_whatever_the_umask(tmp_path: Path, open_umask: None) -> None:
    target = tmp_path / "stack.json"
    write_private(target, '{"a": 1}\n')
    assert target.read_text() == '{"a": 1}\n'
    assert _mode(target) == 0o600
    assert os.listdir(tmp_path) == ["stack.json"]  # no draft left behind


def test_write_private_replaces_a_wide_file_with_a_private_one(tmp_path: Path) -> None:
    target = tmp_path / "stack.json"
    target.write_text("old")
    target.chmod(0o644)  # as an older version left it
    write_private(target, "new")
    assert (target.read_text(), _mode(target)) == ("new", 0o600)


def test_write_private_that_fails_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "stack.json"
    target.write_text("old")

    def refuse(self: Path, other: Path) -> Path:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "replace", refuse)
    with pytest.raises(OSError, match="No space"):
        write_private(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["stack.json"]


def test_a_secret_is_generated_once_0600(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "home" / "redis_password"
    first = read_or_create_secret(path)
    assert len(first) == 43 and first.replace("-", "").replace("_", "").isalnum()
    assert _mode(path) == 0o600
    assert read_or_create_secret(path) == first
    assert os.listdir(path.parent) == ["redis_password"]


def test_a_secret_left_readable_by_others_is_narrowed_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "ui_session_secret"
    path.write_text("kept-secret\n")
    path.chmod(0o644)
    assert read_or_create_secret(path) == "kept-secret"
    assert _mode(path) == 0o600


def test_a_secret_created_meanwhile_by_another_process_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "redis_password"
    path.write_text("theirs")
    path.chmod(0o600)
    monkeypatch.setattr(Path, "exists", lambda self: False)  # it appeared after our check
    assert read_or_create_secret(path) == "theirs"
    assert sorted(os.listdir(tmp_path)) == ["redis_password"]


def test_make_private_clears_group_and_other_bits(tmp_path: Path) -> None:
    path = tmp_path / "worker.log"
    path.write_text("x")
    path.chmod(0o664)
    make_private(path)
    assert _mode(path) == 0o600
    make_private(tmp_path / "missing")  # nothing to do, no error
