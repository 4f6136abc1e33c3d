"""A step's lifecycle after the coordinator chose it: made ready, queued for dispatch, retried,
deferred by a rate limit, or taken back from an expired lease. Each is one guarded UPDATE
(`models.engine.guards`) with its event, in the caller's transaction; a step's claim and the end of
its attempt are the hot transitions in `models.engine.leases`, and a reviewer's or a cancel's
removal of a step is `models.engine.transitions.cancel_step`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session

from models.engine.events import record_event
from models.engine.guards import guarded
from models.errors import IllegalTransition
from models.tables import Step, StepAttempt, utcnow


def ready_step(session: Session, step_id: int) -> Step:
    """pending -> ready: the coordinator chose it; it waits for a dispatch slot of its user
    (`models.engine.dispatch`). `queued_at` is when it became ready (the reconciler's clock)."""
    step = guarded(session, Step, step_id, to="ready", expected=["pending"], queued_at=utcnow())
    record_event(session, step.run_id, "step.ready", step_id=step_id)
    return step


def enqueue_step(session: Session, step_id: int) -> Step:
    """ready -> queued: a dispatch slot of its user is free; its message is sent after commit."""
    step = guarded(session, Step, step_id, to="queued", expected=["ready"], queued_at=utcnow())
    record_event(session, step.run_id, "step.queued", step_id=step_id)
    return step


def _end_attempt(
    session: Session,
    step: Step,
    attempt: int,
    outcome: str,
    error: str | None = None,
    **detail: Any,
) -> None:
    session.execute(
        sa.update(StepAttempt)
        .where(StepAttempt.step_id == step.id, StepAttempt.attempt == attempt)  # type: ignore[arg-type]
        .values(outcome=outcome, error=error, finished_at=utcnow())
    )
    record_event(
        session,
        step.run_id,
        f"step.{outcome}",
        step_id=step.id,
        attempt=attempt,
        **({"error": error} if error else {}),
        **detail,
    )


def _end_held_attempt(
    session: Session,
    step_id: int,
    attempt: int,
    *,
    to: str,
    outcome: str,
    error: str | None = None,
    detail: Callable[[Step], dict[str, Any]] | None = None,
    **values: Any,
) -> Step:
    """running -> `to` for the attempt that holds the step (its lease is released), and the
    attempt's row closed with `outcome` (`detail(step)` goes to its event); any other attempt raises
    `IllegalTransition`."""
    step = guarded(
        session,
        Step,
        step_id,
        to=to,
        expected=["running"],
        where=[Step.attempt == attempt],
        why=f"at attempt {attempt}",
        lease_expires_at=None,
        **({"error": error} if error is not None else {}),
        **values,
    )
    _end_attempt(session, step, attempt, outcome, error, **(detail(step) if detail else {}))
    return step


def retry_step(
    session: Session, step_id: int, *, attempt: int, error: str, backoff_s: float = 0.0
) -> Step:
    """running -> queued after a retryable failure, only for the attempt that holds the step;
    `queued_at` becomes the time it is due, `backoff_s` from now (a claim before it does nothing,
    and the reconciler counts its staleness from then)."""
    due = utcnow() + timedelta(seconds=backoff_s)
    return _end_held_attempt(
        session, step_id, attempt, to="queued", outcome="retry", error=error, queued_at=due
    )


def defer_step(
    session: Session, step_id: int, *, attempt: int, retry_after_s: float, error: str
) -> Step:
    """running -> queued for a rate-limited attempt, only for the attempt that holds the step.

    Not a failure: `deferrals` grows with `attempt`, so the attempt does not count against
    `max_attempts`. `queued_at` becomes the time the step is due (now + `retry_after_s`), so the
    reconciler re-sends it only once it is due and has then waited `AGENTQ_QUEUED_STALE_S`.
    """
    due = utcnow() + timedelta(seconds=retry_after_s)
    step = _end_held_attempt(
        session,
        step_id,
        attempt,
        to="queued",
        outcome="deferred",
        error=error,
        detail=lambda step: {
            "retry_after_s": retry_after_s,
            "due_at": due.isoformat(),
            "deferrals": step.deferrals,
        },
        deferrals=Step.deferrals + 1,
        queued_at=due,
    )
    return step


def await_approval(session: Session, step_id: int, *, attempt: int, why: str) -> Step:
    """running -> waiting_approval for the attempt that holds the step, stopped before a gated
    tool call (`models.approvals`): its lease is released and no worker waits. Not a failure:
    `deferrals` grows with `attempt`, so the attempt does not count against `max_attempts`."""
    return _end_held_attempt(
        session,
        step_id,
        attempt,
        to="waiting_approval",
        outcome="awaiting_approval",
        detail=lambda step: {"why": why},
        deferrals=Step.deferrals + 1,
    )


def await_child(session: Session, step_id: int, *, attempt: int, child_run_id: int) -> Step:
    """running -> waiting_child for the attempt that holds a step of kind `run`, whose child run
    `child_run_id` was submitted in this transaction (`models.engine.children`): its lease is
    released and no worker waits; the step ends with its child (`end_child`)."""
    return _end_held_attempt(
        session,
        step_id,
        attempt,
        to="waiting_child",
        outcome="awaiting_child",
        detail=lambda step: {"child_run_id": child_run_id},
    )


def end_child(
    session: Session,
    step_id: int,
    *,
    result: dict[str, Any] | None,
    error: str | None,
) -> Step | None:
    """waiting_child -> succeeded (with `result`) or failed (with `error`): its child run ended
    (its spend is charged by the caller: `models.engine.children.settle`). None when the step
    was not waiting (another transaction ended it first: the parent resumes once)."""
    succeeded = error is None
    try:
        step = guarded(
            session,
            Step,
            step_id,
            to="succeeded" if succeeded else "failed",
            expected=["waiting_child"],
            result=result if succeeded else None,
            error=error,
            finished_at=utcnow(),
        )
    except IllegalTransition:
        return None
    detail: dict[str, Any] = {"step_id": step_id}
    kind = "step.succeeded" if succeeded else "step.failed"
    record_event(session, step.run_id, kind, **(detail | ({} if succeeded else {"error": error})))
    return step


def approval_decided(session: Session, step_id: int) -> Step:
    """waiting_approval -> ready: a reviewer decided its call; it waits for a dispatch slot of
    its user, and its next attempt reads the decision before the call."""
    step = guarded(
        session, Step, step_id, to="ready", expected=["waiting_approval"], queued_at=utcnow()
    )
    record_event(session, step.run_id, "step.ready", step_id=step_id)
    return step


def failed_attempts(step: Step) -> int:
    """Attempts of `step` that count against `max_attempts`: claims less rate-limit deferrals."""
    return step.attempt - step.deferrals


def expire_lease(session: Session, step_id: int) -> Step:
    """running with an expired lease -> queued, or -> failed when its attempts are spent. A
    step queued again keeps its `queued_at`, its due time, so it goes before its user's younger
    work in the fair queue (`models.engine.fair_queue`)."""
    now = utcnow()
    expired = [Step.lease_expires_at < now]  # type: ignore[operator]
    step = session.get(Step, step_id)
    spent = step is not None and failed_attempts(step) >= step.max_attempts
    error = f"lease expired at attempt {step.attempt if step else '?'}"
    values: dict[str, Any] = {"error": error, "finished_at": now} if spent else {"error": error}
    step = guarded(
        session,
        Step,
        step_id,
        to="failed" if spent else "queued",
        expected=["running"],
        where=expired,
        why="with an expired lease",
        lease_expires_at=None,
        **values,
    )
    _end_attempt(session, step, step.attempt, "lease_expired", error)
    return step
