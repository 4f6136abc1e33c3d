"""No orphans: a process forked by a Celery main process (a pool process, the embedded beat)
dies with it.

Linux sends a process the signal it asked for with `prctl(PR_SET_PDEATHSIG)` when the thread
that forked it exits (prctl(2)); Celery forks its pool processes and its beat from the main
thread. Before issue 11 a kill -9 of the scheduler's main process left its beat running, and
sending the periodic tasks, for good. Elsewhere than Linux there is no such call: the beat lease
(`models.process_leases`) still keeps an orphaned beat from sending alongside a new one.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from typing import Final

_PR_SET_PDEATHSIG: Final = 1  # from <linux/prctl.h>
# Looked up now: dlopen in a child forked from a threaded process may deadlock.
_PRCTL = ctypes.CDLL(None).prctl if sys.platform == "linux" else None


def signal_at_parent_death(signum: int) -> bool:
    """Ask Linux to send this process `signum` when the thread that forked it exits; False (and
    nothing asked) where there is no `prctl`. Safe in a `preexec_fn`: no lookup, no allocation."""
    if _PRCTL is None:
        return False
    _PRCTL(_PR_SET_PDEATHSIG, signum)
    return True


def die_with_parent(parent_pid: int) -> None:
    """Be killed (SIGKILL: no handler can delay it) when the parent dies, from now on, and at
    once if the parent `parent_pid` (the process this one was forked from) has died already,
    before this call could ask: then this process has been reparented."""
    signal_at_parent_death(signal.SIGKILL)
    if os.getppid() != parent_pid:
        os.kill(os.getpid(), signal.SIGKILL)
