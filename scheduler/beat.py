"""The scheduler's beat: Celery's persistent scheduler, which sends a due task only while it
holds the beat's lease (`models.process_leases.BEAT_LEASE`, a row, so it works through a
transaction pooler such as PgBouncer: issue 29).

Set as the scheduler app's `beat_scheduler`, so every `celery -A scheduler.app worker -B` (or
`celery -A scheduler.app beat`) uses it. A second beat on the same database, started by
mistake or by a second scheduler, keeps its schedule but sends nothing. The lease lasts
`LEASE_PERIODS` of the schedule's shortest period (2 s by default, AGENTQ_WEBHOOK_POLL_INTERVAL_S)
and every beat tries it at least every half period (`tick`) and before each due task: the
holder renews it so, and a waiting beat takes it over within half a period of a clean stop
(the holder lets it go) and within 2.5 periods of the holder's death (kill -9, a lost machine:
its lease runs out). Each change between sending and waiting is logged (`beat.active`,
`beat.standby`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable
from typing import Any, Final

import structlog
from celery.beat import PersistentScheduler, ScheduleEntry

from models.process_leases import BEAT_LEASE, ProcessLease

log = structlog.get_logger("agentq.scheduler")
LEASE_PERIODS: Final = 2.0  # the lease's length, in shortest periods: renewals may slip 1.5
DEFAULT_PERIOD_S: Final = 10.0  # a schedule with no fixed period (crontab entries only)


def shortest_period_s(entries: Iterable[ScheduleEntry]) -> float:
    """The shortest period of `entries` with a fixed one (`schedule.run_every`), seconds;
    `DEFAULT_PERIOD_S` when none has."""
    periods = [
        every.total_seconds()
        for entry in entries
        if (every := getattr(entry.schedule, "run_every", None)) is not None
    ]
    return min(periods, default=DEFAULT_PERIOD_S)


def let_go_on_sigterm() -> None:
    """Make SIGTERM raise `SystemExit` in this beat process, if nothing else handles it. The
    embedded beat (`worker -B`) is a process whose SIGTERM Celery leaves at its default, and
    Celery's warm shutdown sends it one, so the beat died without `close` and its lease stayed
    until it ran out (2 periods; measured 3 s to take over in tests/integration/
    test_pgbouncer.py). On `SystemExit` Celery's beat service closes its scheduler, as
    `celery beat` does on SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit)


def _exit(signum: int, frame: object) -> None:
    raise SystemExit(0)


class LockedScheduler(PersistentScheduler):  # type: ignore[misc]
    """A `PersistentScheduler` whose `apply_entry` sends only under the beat's lease; a skipped
    entry still counts as run, so a waiting beat stays in step with the schedule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lease = ProcessLease(BEAT_LEASE, length_s=LEASE_PERIODS * DEFAULT_PERIOD_S)
        self._sending: bool | None = None
        self._try_at = 0.0  # time.monotonic() of the next try in `tick`
        self._try_every_s = DEFAULT_PERIOD_S / 2
        super().__init__(*args, **kwargs)
        let_go_on_sigterm()
        period_s = shortest_period_s(self.schedule.values())
        self.lease.length_s = LEASE_PERIODS * period_s
        self._try_every_s = period_s / 2
        self.max_interval = self._try_every_s  # tick's longest sleep (Celery's default: 300 s)

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Renew or try the lease if half a period has passed since the last try, then Celery's
        `tick`; returns the seconds to sleep, at most half a period."""
        if time.monotonic() >= self._try_at:
            self._holds_lock()
        return float(super().tick(*args, **kwargs))

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Send `entry`'s task (Celery's `apply_entry`) if this beat holds the lease."""
        if self._holds_lock():
            super().apply_entry(entry, producer=producer)

    def close(self) -> None:
        """Write the schedule (Celery's `close`), then let the lease go for another beat."""
        try:
            super().close()
        finally:
            self.lease.release()
            self._sending = None

    def _holds_lock(self) -> bool:
        held = self.lease.held()
        self._try_at = time.monotonic() + self._try_every_s
        if held != self._sending:
            log.info("beat.active" if held else "beat.standby", pid=os.getpid())
            self._sending = held
        return held
