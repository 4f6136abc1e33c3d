"""models/orphans.py: a forked process asks to die with its parent, and dies at once if the
parent is gone already (the real kill -9 of a scheduler is in tests/integration/test_beat.py)."""

from __future__ import annotations

import os
import signal

from models.orphans import die_with_parent


def _exit_status_of_child(parent_pid_told: int | None) -> int:
    """Fork a child that calls `die_with_parent` with its real parent's pid (None) or
    `parent_pid_told`, then exits 7; the child's wait status."""
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: nothing but the call and an exit
        die_with_parent(parent if parent_pid_told is None else parent_pid_told)
        os._exit(7)
    return os.waitpid(pid, 0)[1]


def test_a_child_whose_parent_lives_goes_on() -> None:
    status = _exit_status_of_child(None)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 7


def test_a_child_reparented_before_it_asked_is_killed_at_once() -> None:
    status = _exit_status_of_child(os.getpid() + 100_000)  # not its parent: as if reparented
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
