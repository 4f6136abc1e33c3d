"""What the reconciler (`scheduler.tasks.reconcile`) and a lost worker's recovery
(`worker.execution.recovery`) read and write to find lost work: named SQL, each write one guarded
UPDATE.

A re-send touches a row rather than moving it: a lost step stays `queued` and a quiet run in its
status, and the time its clock restarts from (`steps.queued_at`, `runs.updated_at`) becomes now,
so the next re-send waits a full period. Each write is guarded by the status and age it was
chosen for, in the same statement (DESIGN.md, invariant 1): a step claimed, or a run moved on,
since is left alone and not sent. The caller owns the transaction.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlmodel import Session

from models import sql
from models.tables import Run, utcnow

# expired_leases: running steps whose lease ended before :now (their attempt's worker is lost).
EXPIRED_LEASES: Final = sql.Replanned("""
SELECT id FROM steps WHERE status = 'running' AND lease_expires_at < :now ORDER BY id""")
# due_queued: how many queued steps are due by :now (each was sent once at least).
DUE_QUEUED: Final = sql.Replanned("""
SELECT count(*) FROM steps WHERE status = 'queued' AND queued_at <= :now""")
# lost_steps: the :limit (NULL: every) oldest steps queued before :stale, oldest first.
LOST_STEPS: Final = sql.Replanned("""
SELECT id FROM steps WHERE status = 'queued' AND queued_at < :stale
ORDER BY queued_at, id LIMIT :limit""")
# resend_step: a step still queued since before :stale gets `queued_at` :now (it is sent again).
RESEND_STEP: Final = """
UPDATE steps SET queued_at = :now
WHERE id = :step_id AND status = 'queued' AND queued_at < :stale
RETURNING id"""
# nudge_quiet_runs: runs queued, running or in a phase (:statuses), quiet since :stale, that no
# live phase lease holds, and runs in a phase (:phases) whose holder's lease expired before
# :now; their `updated_at` set to :touched_at; the runs as updated.
NUDGE_QUIET_RUNS: Final = sql.Replanned("""
UPDATE runs SET updated_at = :touched_at
WHERE (status = ANY(:statuses) AND updated_at < :stale
        AND (phase_lease_expires_at IS NULL OR phase_lease_expires_at < :now))
    OR (status = ANY(:phases) AND phase_lease_expires_at < :now)
RETURNING *""")
# running_leases: (id, lease_expires_at) of run :run_id's running steps that hold a lease.
RUNNING_LEASES: Final = """
SELECT id, lease_expires_at FROM steps
WHERE run_id = :run_id AND status = 'running' AND lease_expires_at IS NOT NULL
ORDER BY id"""


def expired_leases(session: Session, *, now: datetime) -> list[int]:
    """Ids of the running steps whose lease ended before `now`, for the reconciler to take back
    (`models.engine.step_transitions.expire_lease`, which checks again)."""
    return [int(row.id) for row in sql.execute(session, EXPIRED_LEASES, {"now": now}).fetchall()]


def due_queued(session: Session, *, now: datetime) -> int:
    """How many steps are queued and due by `now` (`scheduler.tasks.lost_at_most` weighs it
    against the broker's queue depth)."""
    return int(sql.scalar(session, DUE_QUEUED, {"now": now}) or 0)


def lost_steps(session: Session, *, stale: datetime, limit: int | None) -> list[int]:
    """Ids of the steps queued before `stale`, the `limit` oldest (None: all), oldest first:
    the ones whose message may be lost (`scheduler.tasks.lost_at_most` sets `limit`)."""
    params = {"stale": stale, "limit": limit}
    return [int(row.id) for row in sql.execute(session, LOST_STEPS, params).fetchall()]


def resend_step(session: Session, step_id: int, *, stale: datetime, now: datetime) -> bool:
    """queued -> queued, its `queued_at` becoming `now` so the next re-send waits a full
    period, when step `step_id` is still queued since before `stale`; False, changing nothing,
    when it was claimed or re-queued since (then it is not sent)."""
    params = {"step_id": step_id, "stale": stale, "now": now}
    return sql.one(session, RESEND_STEP, params) is not None


def nudge_quiet_runs(
    session: Session,
    *,
    statuses: tuple[str, ...],
    phases: tuple[str, ...],
    stale: datetime,
    now: datetime,
) -> list[Run]:
    """The runs to send their task (or a coordinate) again, with `updated_at` set to the clock:
    those in `statuses` quiet since `stale` that no live phase lease holds (`models.engine.phases`:
    a message may be lost), and those in `phases` whose holder's lease expired before `now` (it
    was killed) however recently they moved. A phase under a live lease is never touched."""
    params = {
        "statuses": list(statuses),
        "phases": list(phases),
        "stale": stale,
        "now": now,
        "touched_at": utcnow(),
    }
    return sql.rows_of(session, Run, NUDGE_QUIET_RUNS, params)


def running_leases(session: Session, run_id: int) -> list[tuple[int, datetime]]:
    """`(step id, lease end)` of each running step of run `run_id` under a lease: the steps a
    lost worker may have gone on to in the same task (`worker.execution.recovery.check_later`)."""
    rows = sql.execute(session, RUNNING_LEASES, {"run_id": run_id}).fetchall()
    return [(int(row.id), row.lease_expires_at) for row in rows]
