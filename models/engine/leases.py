"""A step's lease: claim it, and end the attempt that holds it. The engine's hot transitions.

Each is one named, guarded statement (DESIGN.md, invariants 1 and 2) that also writes what goes
with the move in the same round trip: the `(step_id, attempt)` row, the timeline event and, when
an attempt ends, the step's conversation turn. SQL rather than the ORM because these run once or
twice per step and the ORM's per-statement overhead and extra round trips cost more than the
commit (issue 10: a no-op step took 27 statements in 5.2 transactions). When the row is not in
the expected state nothing changes and `IllegalTransition` names what was found.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlmodel import Session

from models import sql
from models.engine import fair_queue, storage
from models.errors import IllegalTransition, StepNotDue
from models.tables import Step

# claim_step: :expected -> running with a lease and the next attempt number, plus its attempt
# row and event; returns the step, its run's user, its run's pinned facts and how many attempts
# steps of its name have had in the run, this one included, its run's wall-time deadline and its
# run's tightening of the approval policy (`models.approvals`; NULL: none).
# The run's row is locked (key share) before the step's, the order every path takes (a cancel
# locks the run, then its steps): the event's foreign key used to lock the run after the step,
# and a cancel between the two met `deadlock detected` (issue 27, item 10).
CLAIM_STEP: Final = """
WITH run_locked AS (
    SELECT r.id FROM runs r WHERE r.id = (SELECT run_id FROM steps WHERE id = :step_id)
    FOR KEY SHARE
), claimed AS (
    UPDATE steps SET status = 'running', attempt = attempt + 1, started_at = :now,
        lease_expires_at = :lease_until, queued_at = coalesce(queued_at, :now)
    WHERE id = :step_id AND status = :expected AND (queued_at IS NULL OR queued_at <= :now)
        AND run_id = (SELECT id FROM run_locked)
    RETURNING *
), attempt_row AS (
    INSERT INTO step_attempts (step_id, attempt, worker, started_at)
    SELECT id, attempt, :worker, :now FROM claimed
), event AS (
    INSERT INTO run_events (run_id, step_id, at, kind, detail)
    SELECT run_id, id, :now, 'step.running', jsonb_build_object('attempt', attempt) FROM claimed
)
SELECT claimed.*, r.user_id AS run_user_id, r.replan_check AS run_replan_check,
    r.deadline_at AS run_deadline_at,
    (SELECT p.rules FROM run_approvals p WHERE p.run_id = claimed.run_id) AS run_approvals,
    (SELECT coalesce(jsonb_object_agg(f.key, f.value), '{}'::jsonb)
     FROM pinned_facts f WHERE f.run_id = claimed.run_id) AS run_facts,
    1 + (SELECT count(*) FROM step_attempts a JOIN steps s ON s.id = a.step_id
         WHERE s.run_id = claimed.run_id AND s.name = claimed.name) AS run_tries
FROM claimed JOIN runs r ON r.id = claimed.run_id"""

# claim_step_unlocked: CLAIM_STEP for a worker that holds another run's lock (a step taken in fair
# order as it ends its own: `worker.execution.wakeups`): a step or run another transaction has
# locked is skipped, not waited for (two such workers each holding the run the other wants would
# deadlock), and the claim changes nothing.
CLAIM_STEP_UNLOCKED: Final = CLAIM_STEP.replace(
    "FOR KEY SHARE\n), claimed AS (",
    """FOR KEY SHARE SKIP LOCKED
), step_locked AS (
    SELECT id FROM steps WHERE id = :step_id FOR UPDATE SKIP LOCKED
), claimed AS (""",
).replace("WHERE id = :step_id AND status", "WHERE id = (SELECT id FROM step_locked) AND status")


def _ending(guard: str) -> str:
    """The CTEs that end attempt :attempt of step :step_id, when `guard` (SQL) holds too."""
    return f"""done AS (
    UPDATE steps SET status = :to, result = CAST(:result AS jsonb), error = :error,
        finished_at = :now, lease_expires_at = NULL
    WHERE id = :step_id AND status = 'running' AND attempt = :attempt{guard}
    RETURNING id, run_id, attempt, started_at
), attempt_row AS (
    UPDATE step_attempts a SET outcome = :to, error = :error, finished_at = :now
    FROM done WHERE a.step_id = done.id AND a.attempt = done.attempt
), event AS (
    INSERT INTO run_events (run_id, step_id, at, kind, detail)
    SELECT run_id, id, :now, 'step.' || :to, CAST(:detail AS jsonb) || jsonb_build_object(
        'attempt', attempt) FROM done
)"""


# end_attempt: running -> :to (succeeded or failed) for attempt :attempt only, releasing the
# lease; closes the attempt row, records the event and charges the attempt's seconds to its
# run's user (`models.engine.fair_queue`).
END_ATTEMPT: Final = "\nWITH " + _ending("") + fair_queue.CHARGE_STEP
# end_attempt_charged: the same for a result of :bytes, stored only with its charge to the run's
# step-data budget and its user's total (`models.engine.storage.charging`).
END_ATTEMPT_CHARGED: Final = (
    storage.charging(
        "SELECT run_id FROM steps WHERE id = :step_id AND status = 'running' AND attempt = :attempt"
    )
    + ", "
    + _ending(" AND EXISTS (SELECT 1 FROM run_charged)")
    + fair_queue.CHARGE_STEP
)
# ... and the step's conversation turn, unless the run's user was forgotten after the run was
# created (`models.memory.erasures`: the caller holds the user's erasure lock shared, taken in an
# earlier statement), when `memory.dropped` is recorded instead.
WITH_TURN: Final = """, erased AS (
    SELECT e.erased_at FROM memory_erasures e JOIN runs r ON r.id = :run_id
    WHERE e.user_id = :user_id AND r.created_at <= e.erased_at
), turn AS (
    INSERT INTO messages (run_id, user_id, step_id, role, content, token_count, created_at)
    SELECT run_id, :user_id, id, :role, :content, :token_count, :now
    FROM done WHERE NOT EXISTS (SELECT 1 FROM erased)
), dropped AS (
    INSERT INTO run_events (run_id, at, kind, detail)
    SELECT done.run_id, :now, 'memory.dropped',
        jsonb_build_object('what', 'turn', 'erased_at', erased.erased_at)
    FROM done, erased
)"""
RETURN_DONE: Final = "\nSELECT id FROM done"
RETURN_CHARGED: Final = (
    "\nSELECT (SELECT id FROM done) AS id, EXISTS (SELECT 1 FROM run_charged) AS charged"
)
# renew_lease: a heartbeat of the attempt that holds a running step.
RENEW_LEASE: Final = """
UPDATE steps SET lease_expires_at = :lease_until
WHERE id = :step_id AND status = 'running' AND attempt = :attempt
RETURNING id"""
# step_held: whether attempt :attempt still holds step :step_id.
STEP_HELD: Final = "SELECT status = 'running' AND attempt = :attempt FROM steps WHERE id = :step_id"
# step_state: what a refused claim found: the status, and when a queued step is due.
STEP_STATE: Final = "SELECT status, queued_at FROM steps WHERE id = :step_id"


@dataclass(frozen=True)
class Claim:
    """A claimed step (a detached row), with what its claim statement read of its run."""

    step: Step
    user_id: str
    facts: dict[str, str]
    tries: int
    replan_check: str = "off"  # the run's (`models.plans.plan_checks`)
    deadline_at: datetime | None = (
        None  # the run's wall-time deadline (`worker.execution.time_limits`)
    )
    approvals: dict[str, Any] | None = None  # the run's tightening (`models.approvals.calls`)


@dataclass(frozen=True)
class Turn:
    """A step's conversation turn (`models.memory.messages.Message`), its tokens counted by the
    caller."""

    role: str
    content: str
    token_count: int


def claim(
    session: Session,
    step_id: int,
    *,
    worker: str,
    lease_s: float,
    now: datetime,
    expected: str = "queued",
    skip_locked: bool = False,
) -> Claim:
    """`expected` -> running: take a lease of `lease_s` seconds and the next attempt number.

    `expected` is `queued` for a step sent through the broker, `pending` for the next step that
    the worker which finished its last dependency claims itself (`models.engine.decisions`). Raises
    `IllegalTransition` when the step is in another state (a duplicate delivery), or with
    `skip_locked` (`CLAIM_STEP_UNLOCKED`) when another transaction holds it or its run."""
    params = {
        "step_id": step_id,
        "expected": expected,
        "worker": worker,
        "now": now,
        "lease_until": now + timedelta(seconds=lease_s),
    }
    row = sql.one(session, CLAIM_STEP_UNLOCKED if skip_locked else CLAIM_STEP, params)
    if row is None:
        if skip_locked:
            raise IllegalTransition("steps", step_id, "locked or taken", repr(expected))
        raise _refused(session, step_id, expected, now)
    return Claim(
        step_of(row),
        row.run_user_id,
        dict(row.run_facts),
        int(row.run_tries),
        row.run_replan_check,
        row.run_deadline_at,
        row.run_approvals,
    )


def step_of(row: Any) -> Step:
    """The detached `Step` of a claim's row (its `steps` columns; the `run_*` ones are the run's):
    `models.sql.built`."""
    return sql.built(Step, row._asdict())


def end_attempt(
    session: Session,
    step: Step,
    *,
    to: str,
    now: datetime,
    result: dict[str, Any] | None = None,
    error: str | None = None,
    turn: Turn | None = None,
    user_id: str = "",
    charge: storage.Charge | None = None,
    **detail: Any,
) -> None:
    """running -> `to` ("succeeded" with `result`, or "failed" with `error`) for the attempt
    that holds `step` (`step.attempt`), with its `turn` of the conversation (written for
    `user_id` unless they were forgotten after the run was created). `detail` goes to the event.
    With `charge` (the result's size), the attempt ends only with the result charged to its
    run's step-data budget and its user's total (`models.engine.storage`).
    Raises `IllegalTransition` when another attempt holds the step, or it is not running;
    `StepDataBudgetSpent` or `UserStepDataSpent` when the charge does not fit (nothing
    changed: the caller may end the attempt otherwise)."""
    if to not in ("succeeded", "failed"):
        raise ValueError(f"steps: running -> {to} is not an end of an attempt")
    params: dict[str, Any] = {
        "step_id": step.id,
        "attempt": step.attempt,
        "to": to,
        "now": now,
        "result": None if result is None else json.dumps(result),
        "error": error,
        "detail": json.dumps({**detail, **({"error": error} if error else {})}),
    }
    statement = END_ATTEMPT if charge is None else END_ATTEMPT_CHARGED
    if turn is not None:
        statement += WITH_TURN
        params |= {"run_id": step.run_id, "user_id": user_id, **turn.__dict__}
    if charge is None:
        if sql.one(session, statement + RETURN_DONE, params) is None:
            raise _refused(session, step.id or 0, f"'running' at attempt {step.attempt}")
        return
    ended = sql.one(session, statement + RETURN_CHARGED, params | charge.params())
    if ended.id is None:
        raise _uncharged(session, step, charge, charged=bool(ended.charged))


def _uncharged(session: Session, step: Step, charge: storage.Charge, *, charged: bool) -> Exception:
    """Why a charged end of `step`'s attempt stored nothing: the charge did not fit (the attempt
    still holds the step), or the attempt lost the step; a charge its statement made all the
    same (the step changed under it) is refunded first."""
    if charged:
        storage.refund(session, step.run_id, charge)
    params = {"step_id": step.id, "attempt": step.attempt}
    if not charged and sql.scalar(session, STEP_HELD, params):
        return storage.refusal(session, step.run_id, charge)
    return _refused(session, step.id or 0, f"'running' at attempt {step.attempt}")


def _refused(
    session: Session, step_id: int, expected: str, now: datetime | None = None
) -> IllegalTransition:
    """Why a guarded statement on step `step_id` changed nothing; with `now`, a claim of a step
    in the `expected` state that is not due yet is `StepNotDue`."""
    found = sql.one(session, STEP_STATE, {"step_id": step_id})
    status = None if found is None else found.status
    if now is not None and status == expected and found.queued_at and found.queued_at > now:
        return StepNotDue(step_id, due_in_s=(found.queued_at - now).total_seconds())
    return IllegalTransition("steps", step_id, status, repr(expected) if now else expected)


def renew(session: Session, step_id: int, attempt: int, *, lease_s: float, now: datetime) -> bool:
    """Extend the lease of `attempt` on running step `step_id` to `lease_s` seconds from `now`
    (a heartbeat, `worker.execution.heartbeats`); False when the attempt no longer holds the
    step."""
    params = {
        "step_id": step_id,
        "attempt": attempt,
        "lease_until": now + timedelta(seconds=lease_s),
    }
    return sql.one(session, RENEW_LEASE, params) is not None
