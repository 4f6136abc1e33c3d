"""The scheduler's beat: Celery's persistent scheduler, which sends a due task only while it
holds the beat lock (`models.advisory_locks.BEAT_LOCK_KEY`).

Set as the scheduler app's `beat_scheduler`, so every `celery -A scheduler.app worker -B` (or
`celery -A scheduler.app beat`) uses it. A second beat on the same database, started by
mistake or by a second scheduler, keeps its schedule but sends nothing, trying the lock at each
due task; it takes over within one period of the holder's death (its session ends with it).
Each change between sending and waiting is logged (`beat.active`, `beat.standby`).
"""

from __future__ import annotations

import os
from typing import Any

import structlog
from celery.beat import PersistentScheduler, ScheduleEntry

from models.advisory_locks import BEAT_LOCK_KEY, SessionLock

log = structlog.get_logger("agentq.scheduler")


class LockedScheduler(PersistentScheduler):  # type: ignore[misc]
    """A `PersistentScheduler` whose `apply_entry` sends only under the beat lock; a skipped
    entry still counts as run, so a waiting beat stays in step with the schedule."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.lock = SessionLock(BEAT_LOCK_KEY)
        self._sending: bool | None = None
        super().__init__(*args, **kwargs)

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        """Send `entry`'s task (Celery's `apply_entry`) if this beat holds the lock."""
        if self._holds_lock():
            super().apply_entry(entry, producer=producer)

    def close(self) -> None:
        """Write the schedule (Celery's `close`), then let the lock go for another beat."""
        try:
            super().close()
        finally:
            self.lock.release()

    def _holds_lock(self) -> bool:
        held = self.lock.held()
        if held != self._sending:
            log.info("beat.active" if held else "beat.standby", pid=os.getpid())
            self._sending = held
        return held
