"""`<data>/stack.json`: the URLs of the stack running on a data dir, for the CLI in another
terminal (ops/stack.py writes it on start and removes it on stop)."""

from __future__ import annotations

import fcntl
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import psutil

from models.errors import StackError
from models.private_files import write_private
from ops import data_dir as modes

STACK_FILE_NAME = "stack.json"


def read_stack_file(data_dir: Path) -> dict[str, Any] | None:
    """`{"database_url", "broker_url", "pid", "started_at" (ISO 8601), "api_url" (once the API
    listens)}` of the stack running on `data_dir`; None if the file is missing or unreadable, or
    its pid is dead or was reused.

    Raises `StackError` if another user owns the file or may write it (`read_own_file`): it
    names the database and broker that every agentq command then uses.
    """
    path = data_dir / STACK_FILE_NAME
    try:
        state = json.loads(modes.read_own_file(path))
    except (OSError, ValueError):
        return None
    except StackError as exc:
        why = "agentq commands would use the database and broker it names"
        raise StackError(
            f"{exc}, and {why}. Remove it if no agentq up of yours runs there, or set "
            "AGENTQ_HOME to a directory of your own."
        ) from exc
    if not isinstance(state, dict) or not _is_live(state.get("pid"), state.get("started_at")):
        return None
    return state


def _is_live(pid: object, started_at: object) -> bool:
    """Whether `pid` runs and started before `started_at` (else the pid was reused)."""
    if not isinstance(pid, int) or not isinstance(started_at, str):
        return False
    try:
        created_s = float(psutil.Process(pid).create_time())
        return created_s <= datetime.fromisoformat(started_at).timestamp() + 1.0
    except (psutil.Error, ValueError):
        return False


def write_stack_file(data_dir: Path, database_url: str, broker_url: str) -> None:
    """Write `<data_dir>/stack.json` (see `read_stack_file`) whole and 0600 from the start: it
    holds the broker's password. Raises `OSError` if the dir is not writable."""
    state = {
        "database_url": database_url,
        "broker_url": broker_url,
        "pid": os.getpid(),
        "started_at": datetime.now(UTC).isoformat(),
    }
    write_private(data_dir / STACK_FILE_NAME, json.dumps(state, indent=2) + "\n")


def record_api_url(data_dir: Path, api_url: str) -> None:
    """Add `api_url`, the API's base URL, to `<data_dir>/stack.json` once the API listens
    (`agentq up`): what a second `agentq up` on the data dir checks (`ops.preflight`). Raises
    `OSError` or `ValueError` if the file is gone or unreadable."""
    path = data_dir / STACK_FILE_NAME
    state = json.loads(modes.read_own_file(path))
    write_private(path, json.dumps({**state, "api_url": api_url}, indent=2) + "\n")


def claim_data_dir(data_dir: Path) -> IO[bytes]:
    """Lock `<data>/stack.lock` for the stack about to start on `data_dir`; the open file (its
    flock lasts while it is open). Raises `StackError` if a stack runs there already.

    The flock closes the window between checking stack.json and writing it, and a crash
    releases it; stack.json alone still counts where flock is a no-op (some NFS)."""
    lock = modes.open_private_append(data_dir / "stack.lock")
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            running = read_stack_file(data_dir)
        except BlockingIOError:
            running = read_stack_file(data_dir) or {"pid": "unknown"}
    except BaseException:
        lock.close()
        raise
    if running is not None:
        lock.close()
        raise StackError(f"agentq up is already running on {data_dir} (pid {running['pid']})")
    return lock
