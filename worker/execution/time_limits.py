"""A step's time limit, enforced inside the running step.

A step may run for `AGENTQ_STEP_TIME_LIMIT_S`, and never past its run's wall-time deadline
(`runs.deadline_at`, the wall-time budget: DESIGN.md, invariant 4): its limit is the lesser of
the two, taken when it starts (`StepTimeLimit.of`). `enforced` arms a one-shot `SIGALRM` timer
(`setitimer`) in the worker's pool process for that long. When it goes off in the middle of the
step (a tool's sleep, a model request being read, a statement), its handler raises
`StepTimeLimitExceeded` right there, as Celery's soft time limit raises `SoftTimeLimitExceeded`
from its SIGUSR1 handler (billiard's pool): the step ends at its limit, not after it. Issue 27,
item 14: `--wall-time 5` let a 15 s step finish before the run escalated.

`StepTimeLimitExceeded` is a `SoftTimeLimitExceeded`, so what settles work the soft limit cuts
off settles it too (a model call whose request is out keeps its reservation and is recorded
`cut_off`: `worker.model_calls.calls`). The rungs stay as they are (DESIGN.md, invariant 8): the
step's limit is at most `AGENTQ_STEP_TIME_LIMIT_S`, under Celery's soft time limit, which still
bounds the whole task. The lease's heartbeat runs in a thread of its own and goes on meanwhile
(`worker.execution.heartbeats`): Python runs signal handlers in the main thread only, which is where
Celery's prefork pool runs a task. Called from another thread, `enforced` arms nothing and
logs so. A timer someone else armed in the process (pytest-timeout's) is put back when the
step ends, less the time it took, and goes off during the step if it is due first.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from types import FrameType
from typing import Any, Final

import structlog
from billiard.exceptions import SoftTimeLimitExceeded

log = structlog.get_logger("agentq.worker")
WALL_TIME_REASON: Final = "wall_time_budget_spent"  # the escalation's, as the coordinator's


@dataclass(frozen=True)
class StepTimeLimit:
    """How long a step may run, s, and whether its run's wall time left set it (`by_deadline`)
    rather than `AGENTQ_STEP_TIME_LIMIT_S`."""

    seconds: float
    by_deadline: bool = False

    @classmethod
    def of(cls, step_limit_s: float, deadline_at: datetime | None, now: datetime) -> StepTimeLimit:
        """The lesser of `step_limit_s` and the time from `now` to the run's `deadline_at`
        (None: no deadline), which may be 0 or less when the deadline has passed."""
        if deadline_at is None:
            return cls(step_limit_s)
        left_s = (deadline_at - now).total_seconds()
        return cls(left_s, by_deadline=True) if left_s < step_limit_s else cls(step_limit_s)

    def describe(self) -> str:
        """What ended a step at this limit, for its error."""
        if self.by_deadline:
            return (
                "step stopped at its run's wall-time deadline (the wall-time budget; "
                f"{max(self.seconds, 0):.3g} s were left when it started)"
            )
        return f"step exceeded its time limit ({self.seconds:g} s, AGENTQ_STEP_TIME_LIMIT_S)"


class StepTimeLimitExceeded(SoftTimeLimitExceeded):  # type: ignore[misc]  # billiard is untyped
    """A step ran to its time limit (`StepTimeLimit`); past its run's deadline, the run escalates
    `wall_time_budget_spent` (`reason`), else the step is tried again as after a soft limit."""

    def __init__(self, limit: StepTimeLimit) -> None:
        super().__init__(limit.describe())
        self.limit = limit
        self.reason = WALL_TIME_REASON if limit.by_deadline else ""

    def __str__(self) -> str:  # billiard's prints the args tuple
        return self.limit.describe()


@contextmanager
def enforced(limit: StepTimeLimit) -> Iterator[None]:
    """Run the block under `limit`: `StepTimeLimitExceeded` is raised inside it when the limit
    passes, and at once when there is no time left. See the module docstring."""
    if limit.seconds <= 0:
        raise StepTimeLimitExceeded(limit)
    if threading.current_thread() is not threading.main_thread():
        log.warning("step.time_limit_not_enforced", reason="not the main thread")
        yield
        return
    alarm = _Alarm(limit)
    alarm.arm()
    try:
        yield
    finally:
        alarm.disarm()


class _Alarm:
    """The process's SIGALRM timer, held for one step, and whatever held it before."""

    def __init__(self, limit: StepTimeLimit) -> None:
        self.limit = limit
        self.armed = False
        self.started = time.monotonic()
        self.previous: Any = None  # the handler before ours (a callable, SIG_DFL or SIG_IGN)
        self.other_s = 0.0  # what was left of another timer

    def arm(self) -> None:
        self.previous = signal.signal(signal.SIGALRM, self._went_off)
        self.other_s, _ = signal.setitimer(signal.ITIMER_REAL, self.limit.seconds)
        if 0 < self.other_s < self.limit.seconds:  # the other one is due first
            signal.setitimer(signal.ITIMER_REAL, self.other_s)
        self.armed = True

    def disarm(self) -> None:
        self.armed = False  # first: a signal handled from here on raises nothing
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        left_s = self.other_s - (time.monotonic() - self.started)
        if self.other_s > 0:
            signal.setitimer(signal.ITIMER_REAL, max(left_s, 0.001))

    def _went_off(self, signum: int, frame: FrameType | None) -> None:
        elapsed_s = time.monotonic() - self.started
        if self.other_s > 0 and elapsed_s < self.limit.seconds:  # the other timer's turn
            self.other_s = 0.0
            signal.setitimer(signal.ITIMER_REAL, self.limit.seconds - elapsed_s)
            if callable(self.previous):
                self.previous(signum, frame)
            return
        if self.armed:
            self.armed = False
            raise StepTimeLimitExceeded(self.limit)
