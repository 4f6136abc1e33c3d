"""ops/data_dir.py: the modes of an embedded stack's data dir, and who may traverse it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from models.errors import StackError
from ops import data_dir as modes


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_make_private_dir_creates_or_narrows_to_0700(tmp_path: Path) -> None:
    fresh = tmp_path / "home" / "logs"
    modes.make_private_dir(fresh)
    assert _mode(fresh) == 0o700
    old = tmp_path / "old"
    old.mkdir(mode=0o755)
    old.chmod(0o755)
    modes.make_private_dir(old)
    assert _mode(old) == 0o700


def test_lock_down_without_postgres_group_is_0700(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    modes.lock_down([tmp_path], None)
    assert _mode(tmp_path) == 0o700


def test_lock_down_for_postgres_lets_only_its_group_traverse(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    modes.lock_down([tmp_path], os.getegid())
    assert _mode(tmp_path) == 0o710  # group may pass through, never list; others nothing
    assert tmp_path.stat().st_gid == os.getegid()


def test_lock_down_refuses_a_shared_sticky_dir(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(StackError, match="shared directory"):
        modes.lock_down([shared], None)
    assert _mode(shared) == 0o1777  # left as it was


def test_postgres_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert modes.postgres_group(os.getpid()) is None  # Postgres runs as this very user
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert modes.postgres_group(None) == os.getegid()  # what pgserver's processes inherit
    assert modes.postgres_group(os.getpid()) == os.getegid()  # read from the process
    with pytest.raises(StackError, match="group of Postgres"):
        modes.postgres_group(2**22 + 1)  # above Linux's pid_max: no such process


def test_data_dirs_include_home_when_inside_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "demo").mkdir(parents=True)
    assert modes.data_dirs(home / "demo", home) == [home.resolve(), (home / "demo").resolve()]
    assert modes.data_dirs(home, home) == [home.resolve()]
    assert modes.data_dirs(tmp_path / "elsewhere", home) == [(tmp_path / "elsewhere").resolve()]


def test_make_files_private_narrows_files_but_not_dirs_or_symlink_targets(tmp_path: Path) -> None:
    data, other = tmp_path / "data", tmp_path / "other"
    (data / "sub").mkdir(parents=True, mode=0o755)
    other.mkdir()
    outside = other / "outside.txt"
    outside.write_text("x")
    outside.chmod(0o644)
    (data / "link").symlink_to(outside)
    for name in ("celerybeat-schedule", "stack.lock"):
        (data / name).write_text("")
        (data / name).chmod(0o666)
    modes.make_files_private(data)
    assert _mode(data / "celerybeat-schedule") == _mode(data / "stack.lock") == 0o600
    assert _mode(outside) == 0o644  # chmod does not follow the link out of the data dir
    assert _mode(data / "sub") == 0o755  # dirs are make_private_dir's


def test_open_private_append_creates_0600_and_narrows_an_old_log(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        with modes.open_private_append(tmp_path / "new.log") as log:
            log.write(b"a")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new.log") == 0o600
    wide = tmp_path / "worker.log"
    wide.write_bytes(b"before\n")
    wide.chmod(0o644)
    with modes.open_private_append(wide) as log:
        log.write(b"after\n")
    assert (wide.read_bytes(), _mode(wide)) == (b"before\nafter\n", 0o600)
