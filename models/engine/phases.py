"""A paid phase's claim: plan, replan, synthesis and fact extraction run once per delivery that
holds the run's phase, as a step runs once per attempt that holds the step (issue 11).

A phase is the run's status while its task is out (`planning`, `replanning`, `synthesizing`) or,
for fact extraction, the run's end (`succeeded`, `failed`, `cancelled`). Its task claims the
phase before it calls the model: the next `phase_attempt`, a lease of `AGENTQ_LEASE_S` and the
worker's name, in one guarded UPDATE that succeeds only while no other attempt holds a live
lease. A second delivery of the task (the broker delivering twice, the reconciler re-sending a
task that waited in a backlog) then finds the phase held and does nothing, so no model call is
made twice. The attempt writes its result only while it still holds the phase (`end`: the same
row, `phase_attempt` unchanged), which also releases the lease; a new phase (`start_planning`,
`start_replanning`, `start_synthesis`) starts unheld, as does a deferred one (`defer_run`), whose
next claim waits until it is due (`runs.updated_at`, the time the deferral set).

The lease is a step's (`AGENTQ_LEASE_S`, 10 s by default), renewed while the task runs: its
worker process's heartbeat renews the phase every `AGENTQ_HEARTBEAT_S` (`renew`,
`worker.execution.heartbeats`), as it renews a running step's lease. A live attempt keeps its phase
however long its model call takes; a killed one's lease expires about a lease after its last beat,
and the reconciler sends the task again (`scheduler.tasks.reconcile`) within its next pass.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.tables import Run, utcnow

# claim_phase: the next phase attempt, with a lease, for a run in one of :statuses whose phase no
# other attempt holds (never claimed, released, or its lease expired) and, when deferred, is due;
# returns the run.
CLAIM_PHASE: Final = """
UPDATE runs SET phase_attempt = phase_attempt + 1, phase_lease_expires_at = :lease_until,
    phase_worker = :worker
WHERE id = :run_id AND status = ANY(:statuses)
    AND (phase_lease_expires_at IS NULL OR phase_lease_expires_at < :now)
    AND (deferrals = 0 OR updated_at <= :now)
RETURNING *"""
# phase_state: why a claim was refused.
PHASE_STATE: Final = """
SELECT status, deferrals, updated_at, phase_lease_expires_at FROM runs WHERE id = :run_id"""
# end_phase: release the phase if attempt :attempt still holds it, charging :used_s worker
# seconds to the run's user (`models.engine.fair_queue`); the row stays locked until the transaction
# ends, so what the attempt writes next is written by the phase's holder.
END_PHASE: Final = """
WITH ended AS (
    UPDATE runs SET phase_lease_expires_at = NULL
    WHERE id = :run_id AND phase_attempt = :attempt AND status = ANY(:statuses)
    RETURNING id, user_id
), charged AS (
    INSERT INTO user_service (user_id, service_s) SELECT user_id, :used_s FROM ended
    ON CONFLICT (user_id) DO UPDATE SET service_s = user_service.service_s + excluded.service_s
)
SELECT id FROM ended"""
# renew_phase: a heartbeat of attempt :attempt while it holds the phase (not released, not
# taken over by a later attempt, and the run has not left the phase, which releases it too).
RENEW_PHASE: Final = """
UPDATE runs SET phase_lease_expires_at = :lease_until
WHERE id = :run_id AND phase_attempt = :attempt AND phase_lease_expires_at IS NOT NULL
RETURNING id"""

# keep_answer: a synthesis's paid answer, written while attempt :attempt holds the phase, before
# its goal check (`worker.phases.synthesis`): a later delivery of the same synthesis checks it again
# instead of paying for a new one.
KEEP_ANSWER: Final = """
UPDATE runs SET final_result = CAST(:final AS jsonb)
WHERE id = :run_id AND phase_attempt = :attempt AND phase_lease_expires_at IS NOT NULL
    AND status = 'synthesizing'
RETURNING id"""


@dataclass(frozen=True)
class Claimed:
    """A phase held by this attempt: the run as the claim left it, the attempt number, and when
    it was claimed (`at`: `held_s` charges the phase's time to its user)."""

    run: Run
    attempt: int
    at: datetime | None = None

    def held_s(self) -> float:
        """Seconds since the claim (0 when unknown): the worker time the phase has had."""
        return 0.0 if self.at is None else max(0.0, (utcnow() - self.at).total_seconds())


@dataclass(frozen=True)
class Refused:
    """A claim that took nothing: the run's status, and when a deferred phase is due (None when
    it is not deferred, or held by another attempt, or the run has left the phase)."""

    status: str | None
    due_in_s: float | None = None


def claim(
    session: Session,
    run_id: int,
    *,
    statuses: tuple[str, ...],
    worker: str,
    lease_s: float,
    now: datetime,
) -> Claimed | Refused:
    """Claim the phase of run `run_id` (in one of `statuses`) for `lease_s` seconds, in the
    caller's transaction; `Refused` when another attempt holds it, the run is in no such status
    (a duplicate or late delivery), or a deferred phase is not due yet (`due_in_s`)."""
    params = {
        "run_id": run_id,
        "statuses": list(statuses),
        "worker": worker,
        "now": now,
        "lease_until": now + timedelta(seconds=lease_s),
    }
    row = sql.one(session, CLAIM_PHASE, params)
    if row is not None:
        return Claimed(sql.loaded(session, Run, row._asdict()), int(row.phase_attempt), now)
    state = sql.one(session, PHASE_STATE, {"run_id": run_id})
    if state is None:
        return Refused(None)
    held = state.phase_lease_expires_at is not None and state.phase_lease_expires_at >= now
    if state.status in statuses and not held and state.deferrals and state.updated_at > now:
        return Refused(state.status, (state.updated_at - now).total_seconds())
    return Refused(state.status)


def end(
    session: Session,
    run_id: int,
    attempt: int,
    *,
    statuses: tuple[str, ...],
    used_s: float = 0.0,
) -> bool:
    """Release the phase that `attempt` holds, keeping the run row locked for the caller's writes,
    and charge its `used_s` worker seconds (`Claimed.held_s`) to the run's user; False when
    another attempt took the phase over or the run left `statuses` (write nothing)."""
    params = {
        "run_id": run_id,
        "attempt": attempt,
        "statuses": list(statuses),
        "used_s": max(0.0, used_s),
    }
    return sql.one(session, END_PHASE, params) is not None


def keep_answer(
    session: Session, run_id: int, attempt: int, *, final: dict[str, Any] | None
) -> bool:
    """Write the synthesis answer `final` as run `run_id`'s `final_result` (None: clear it)
    while `attempt` holds its phase (the phase stays held; `start_synthesis` clears it for the
    next synthesis); False when another attempt took the phase over (nothing written)."""
    text = json.dumps(final) if final is not None else None
    params = {"run_id": run_id, "attempt": attempt, "final": text}
    return sql.one(session, KEEP_ANSWER, params) is not None


def renew(session: Session, run_id: int, attempt: int, *, lease_s: float, now: datetime) -> bool:
    """Extend the lease of `attempt` on run `run_id`'s phase to `lease_s` seconds from `now` (a
    heartbeat, `worker.execution.heartbeats`); False when the attempt no longer holds the phase."""
    params = {
        "run_id": run_id,
        "attempt": attempt,
        "lease_until": now + timedelta(seconds=lease_s),
    }
    return sql.one(session, RENEW_PHASE, params) is not None
