"""The embedded stack's child processes: what they inherit, and how they are stopped and reaped.

Each child runs with umask 077 and asks Linux for SIGTERM when the thread that started it dies,
so a crashed `agentq up` leaves no ghost workers. Stopping signals the main process first (for
Celery, a warm shutdown), then SIGKILLs its process group; a child is reaped only after its
group was signalled, since until then its pid, and so its group id, cannot be reused.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from types import FrameType
from typing import Final, NoReturn

from models.orphans import signal_at_parent_death
from ops.data_dir import CHILD_UMASK

POLL_INTERVAL_SECONDS: Final = 0.05


def prepare_child() -> None:
    """Run in the child before exec: umask 077 (what it creates is private), and ask Linux for
    SIGTERM when the parent thread dies."""
    os.umask(CHILD_UMASK)
    signal_at_parent_death(signal.SIGTERM)


def exit_on_sigterm() -> None:
    """Make SIGTERM (a time box, a supervisor, `kill`) end this process as `sys.exit(143)` does,
    unwinding its `finally` blocks, so what it started (the embedded stack, a model server)
    stops with it; by default a TERM ends Python at once and leaves its children running."""
    signal.signal(signal.SIGTERM, _exit_143)


def interrupt_on_sigterm() -> None:
    """Make SIGTERM act as Ctrl-C does (a `KeyboardInterrupt`), for a foreground process with
    a graceful stop of its own (`agentq up`: a first interrupt lets running steps finish, a
    second kills them); a supervisor or a CI job, whose SIGINT may be ignored, stops it so."""
    signal.signal(signal.SIGTERM, _interrupt)


def _exit_143(signum: int, frame: FrameType | None) -> NoReturn:
    raise SystemExit(128 + signum)


def _interrupt(signum: int, frame: FrameType | None) -> NoReturn:
    raise KeyboardInterrupt


def terminate(popens: list[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM each main process, wait up to `grace_s` seconds in all for them to exit, then
    SIGKILL each process group (those still running, and what the others left) and reap."""
    for popen in popens:
        if not has_exited(popen):  # a zombie still holds its pid: the signal cannot go astray
            os.kill(popen.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        while not all(has_exited(p) for p in popens) and time.monotonic() < deadline:
            time.sleep(POLL_INTERVAL_SECONDS)
    finally:
        for popen in popens:
            reap(popen)


def has_exited(popen: subprocess.Popen[bytes]) -> bool:
    """Whether the child has exited, without reaping it: until it is reaped its pid, and so
    its process group id, cannot be reused, so the group can still be signalled safely."""
    if popen.returncode is not None:
        return True
    try:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        return os.waitid(os.P_PID, popen.pid, flags) is not None
    except ChildProcessError:  # reaped already, by someone else: settle its returncode
        popen.poll()
        return True


def reap(popen: subprocess.Popen[bytes]) -> int:
    """SIGKILL the child's process group (the child, if still running, and anything it left),
    then reap the child; returns its exit code."""
    if popen.returncode is None:  # not reaped: the group id is still the child's
        with contextlib.suppress(ProcessLookupError):
            os.killpg(popen.pid, signal.SIGKILL)
    return popen.wait()
