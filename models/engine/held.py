"""Work that waits in Postgres for the reconciler to send it (issue 11): held until due, or lost.

A step whose retry back-off or 429 retry-after is over half the visibility timeout is not parked
in the broker (`models.engine.queue.held_back`, kombu#337): its row holds the due time (`queued_at`)
and no message exists. It is told from the rows alone: its delay, from the end of its last attempt
(`step_attempts.finished_at`, written with the outcome `retry` or `deferred`) to its due time,
is over half the visibility timeout. The reconciler sends each such step once it has come due
in the window since its previous tick (`due_held_steps`), rather than waiting a further
`AGENTQ_QUEUED_STALE_S` as for a lost message (which took 60 s past the due time). A deferred
phase (`runs.deferrals` > 0, due at `runs.updated_at`) is sent the same way; one whose delay
was short has its countdown message as well, and the phase claim turns the second away.

An ended run's memory task is asked for by one message (`agentq.remember_run`); if the broker
lost it, the run never had its episode and facts. `unremembered_runs` finds the ended runs whose
memory task has not ended, for the reconciler to ask once more; and those whose memory task was
killed holding its extraction's claim, as soon as that claim's lease has run out.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sqlmodel import Session

from models import sql
from models.engine.ended_runs import MEMORY_ENDED_OF

# due_held_steps: queued steps that came due in (:since, :now] and whose delay from the end of
# their last attempt was over :held_over_s seconds (no message of theirs is in the broker).
DUE_HELD_STEPS: Final = sql.Replanned("""
SELECT s.id FROM steps s
JOIN step_attempts a ON a.step_id = s.id AND a.attempt = s.attempt
WHERE s.status = 'queued' AND s.queued_at > :since AND s.queued_at <= :now
    AND s.queued_at - a.finished_at > make_interval(secs => :held_over_s)
ORDER BY s.queued_at, s.id""")
# due_deferred_runs: runs in a phase whose deferral came due in (:since, :now], unheld.
DUE_DEFERRED_RUNS: Final = sql.Replanned("""
SELECT id, status FROM runs
WHERE status = ANY(:statuses) AND deferrals > 0 AND phase_lease_expires_at IS NULL
    AND updated_at > :since AND updated_at <= :now
ORDER BY id""")


def due_held_steps(
    session: Session, *, since: datetime, now: datetime, visibility_s: float
) -> list[int]:
    """Ids of the queued steps held in Postgres (delay over `visibility_s / 2`) that came due
    after `since` and by `now`, oldest due first."""
    params = {"since": since, "now": now, "held_over_s": visibility_s / 2}
    return [int(row.id) for row in sql.execute(session, DUE_HELD_STEPS, params).fetchall()]


def due_deferred_runs(
    session: Session, *, statuses: tuple[str, ...], since: datetime, now: datetime
) -> list[tuple[int, str]]:
    """`(run id, status)` of each unheld run in one of `statuses` whose deferral came due after
    `since` and by `now`."""
    params = {"statuses": list(statuses), "since": since, "now": now}
    rows = sql.execute(session, DUE_DEFERRED_RUNS, params).fetchall()
    return [(int(row.id), str(row.status)) for row in rows]


# unremembered_runs: ended runs whose memory task has not ended
# (`models.engine.ended_runs.MEMORY_ENDED_OF`): those that ended in (:since, :before] and whose
# extraction no attempt holds (the message that asks for it, `agentq.remember_run`, sent after the
# run ended, may be lost), and those whose extraction's holder let its lease expire in
# (:expired_since, :now] (it was killed: the redelivery of its message found the lease still live
# and did nothing).
UNREMEMBERED_RUNS: Final = sql.Replanned(f"""
SELECT r.id FROM runs r
WHERE r.status = ANY(:statuses) AND NOT {MEMORY_ENDED_OF} AND (
    (r.finished_at > :since AND r.finished_at <= :before
        AND (r.phase_lease_expires_at IS NULL OR r.phase_lease_expires_at < :now))
    OR (r.phase_lease_expires_at > :expired_since AND r.phase_lease_expires_at <= :now))
ORDER BY r.id LIMIT :limit""")


def unremembered_runs(
    session: Session,
    *,
    statuses: tuple[str, ...],
    since: datetime,
    before: datetime,
    expired_since: datetime,
    now: datetime,
    limit: int,
) -> list[int]:
    """Ids of up to `limit` runs in `statuses` (the ended ones) still waiting for their memory
    task: those that ended after `since` and by `before`, none holding it, and those whose
    holder's lease ran out after `expired_since` and by `now`."""
    params = {"statuses": list(statuses), "since": since, "before": before, "now": now}
    params["expired_since"] = expired_since
    rows = sql.execute(session, UNREMEMBERED_RUNS, {**params, "limit": limit}).fetchall()
    return [int(row.id) for row in rows]
