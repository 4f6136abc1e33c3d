"""Lease heartbeats: while a step or a paid phase runs, its worker process renews its lease.

One daemon thread per worker process wakes every `AGENTQ_HEARTBEAT_S` and renews the lease of
what this process holds, if anything: a running step's attempt (`models.engine.leases.renew`) or a
run's phase attempt (plan, replan, synthesis, fact extraction: `models.engine.phases.renew`), one
guarded UPDATE in a transaction of its own. So both leases can be short (`AGENTQ_LEASE_S`, 10 s
by default) and a killed worker's step or phase is taken back within about a lease (issue 11,
item 6: with a lease longer than the hard time limit, 160 to 180 s, recovery took minutes).
Work that ends before the first beat is never renewed: its claim's lease covers it, as the last
beat's covers the transaction that ends it. The thread starts with the first hold and lives as
long as the process; it holds no transaction between beats, and a beat that fails (the database
is away) is logged and tried again at the next one. Celery's hard time limit kills the pool
process, and its heartbeats with it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime

import structlog
from sqlmodel import Session

from models.db import session_scope
from models.engine import leases, phases
from models.errors import DatabaseError
from models.settings import get_settings
from models.tables import utcnow

log = structlog.get_logger("agentq.worker")


@dataclass(frozen=True)
class StepHeld:
    """A step attempt this process runs: its step and attempt number."""

    step_id: int
    attempt: int

    def renew(self, session: Session, *, lease_s: float, now: datetime) -> bool:
        """One beat (`models.engine.leases.renew`); False when the attempt lost the step."""
        return leases.renew(session, self.step_id, self.attempt, lease_s=lease_s, now=now)


@dataclass(frozen=True)
class PhaseHeld:
    """A run's phase this process holds: the run and its `phase_attempt`."""

    run_id: int
    phase_attempt: int

    def renew(self, session: Session, *, lease_s: float, now: datetime) -> bool:
        """One beat (`models.engine.phases.renew`); False when the attempt lost the phase."""
        return phases.renew(session, self.run_id, self.phase_attempt, lease_s=lease_s, now=now)


Held = StepHeld | PhaseHeld


class Heartbeat:
    """The process's heartbeat: `holding(held)` while a step or phase runs, `release()` after,
    or both at once with `renewing(held)`. It renews one thing at a time: a pool process runs
    one task at a time, and a step and a phase never overlap in it."""

    def __init__(self) -> None:
        self._held: Held | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def holding(self, held: Held) -> None:
        """Renew `held`'s lease from the next beat on, until `release`."""
        with self._lock:
            self._held = held
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
                self._thread.start()

    def release(self) -> None:
        """Stop renewing: the outcome is about to be written (or the hold was lost)."""
        with self._lock:
            self._held = None

    @contextmanager
    def renewing(self, held: Held) -> Iterator[None]:
        """`holding(held)` while the block runs, `release()` when it ends or raises."""
        self.holding(held)
        try:
            yield
        finally:
            self.release()

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
                    kept = held.renew(session, lease_s=settings.lease_s, now=utcnow())
            except DatabaseError as exc:
                log.warning("heartbeat.failed", **asdict(held), error=str(exc)[:200])
                continue
            if not kept:  # another attempt holds it now, or it ended
                with self._lock:
                    if self._held == held:
                        self._held = None
                        log.info("heartbeat.lost", **asdict(held))


heartbeat = Heartbeat()
