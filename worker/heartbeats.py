"""Lease heartbeats: while a step runs, its worker process renews the step's lease.

One daemon thread per worker process wakes every `AGENTQ_HEARTBEAT_S` and renews the lease of
the step this process is running, if any (`models.leases.renew`, one guarded UPDATE in a
transaction of its own), so the lease can be short (`AGENTQ_LEASE_S`, 10 s by default) and a
killed worker's step is taken back within about a lease (issue 11, item 6: with a lease longer
than the hard time limit, 180 s, recovery took minutes). A step that ends before the first beat
is never renewed: its claim's lease covers it. The thread starts with the first step and lives
as long as the process; it holds no transaction between beats, and a beat that fails (the
database is away) is logged and tried again at the next one. Celery's hard time limit kills
the pool process, and its heartbeats with it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import structlog

from models import leases
from models.db import session_scope
from models.errors import DatabaseError
from models.settings import get_settings
from models.tables import utcnow

log = structlog.get_logger("agentq.worker")


@dataclass(frozen=True)
class Held:
    """The attempt this process runs: its step and attempt number."""

    step_id: int
    attempt: int


class Heartbeat:
    """The process's heartbeat: `holding(step_id, attempt)` while a step runs, `release()` after."""

    def __init__(self) -> None:
        self._held: Held | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def holding(self, step_id: int, attempt: int) -> None:
        """Renew `attempt`'s lease on `step_id` from the next beat on, until `release`."""
        with self._lock:
            self._held = Held(step_id, attempt)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
                self._thread.start()

    def release(self) -> None:
        """Stop renewing: the step's outcome is about to be written (or it was lost)."""
        with self._lock:
            self._held = None

    def _beat(self) -> None:
        while True:
            settings = get_settings()
            time.sleep(settings.heartbeat_s)
            with self._lock:
                held = self._held
            if held is None:
                continue
            try:
                with session_scope() as session:
                    kept = leases.renew(
                        session, held.step_id, held.attempt, lease_s=settings.lease_s, now=utcnow()
                    )
            except DatabaseError as exc:
                log.warning("heartbeat.failed", step_id=held.step_id, error=str(exc)[:200])
                continue
            if not kept:  # another attempt holds the step now, or it ended
                log.info("heartbeat.lost", step_id=held.step_id, attempt=held.attempt)
                with self._lock:
                    if self._held == held:
                        self._held = None


heartbeat = Heartbeat()
