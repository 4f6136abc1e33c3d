"""The engine moving a run through its phases: planning, replanning, synthesis, deferral, its
success, and escalation to a reviewer. Each is one guarded UPDATE (`models.engine.guards`) with its
event, in the caller's transaction; what reviewers and commands do to a run is in
`models.engine.transitions`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sqlalchemy.dialects.postgresql import insert
from sqlmodel import Session, col

from models.engine import notifications
from models.engine.events import record_event
from models.engine.guards import guarded, move_run
from models.errors import BudgetExhausted, IllegalTransition
from models.settings import get_settings
from models.tables import Escalation, Run, utcnow


def start_planning(session: Session, run_id: int) -> Run:
    """queued -> planning."""
    return move_run(session, run_id, to="planning", expected=["queued"], deferrals=0)


def start_replanning(session: Session, run_id: int, *, source: str = "running") -> Run:
    """running -> replanning (or synthesizing -> replanning, `source`, when a goal check found
    the goal not met), charging one replan to the budget in the same UPDATE.

    Raises `BudgetExhausted` when the run is in `source` but its replan budget is spent, and
    `IllegalTransition` when it is not in `source`.
    """
    try:
        run = guarded(
            session,
            Run,
            run_id,
            to="replanning",
            expected=[source],
            where=[Run.replans_used + 1 <= Run.replans_limit],
            why="with a replan left in its budget",
            replans_used=Run.replans_used + 1,
            deferrals=0,
            updated_at=utcnow(),
            phase_lease_expires_at=None,
        )
    except IllegalTransition as exc:
        if exc.found == source:
            raise BudgetExhausted(f"run {run_id}: replan budget spent") from exc
        raise
    record_event(session, run_id, "run.replanning", replans_used=run.replans_used)
    return run


def start_synthesis(session: Session, run_id: int) -> Run:
    """running -> synthesizing: every step of the current plan is done; an answer an earlier
    synthesis wrote before its goal check (`models.engine.phases.keep_answer`) is cleared."""
    return move_run(
        session, run_id, to="synthesizing", expected=["running"], deferrals=0, final_result=None
    )


def defer_run(
    session: Session,
    run_id: int,
    *,
    phase: str,
    retry_after_s: float,
    max_deferrals: int,
    error: str,
) -> Run:
    """A rate-limited `phase` task (planning, replanning, synthesizing) waits `retry_after_s`.

    The run stays in its phase; `deferrals` grows by one and `updated_at` becomes the time the
    task is due again, so the reconciler's quiet-run clock starts then, not now, and no claim of
    the phase succeeds before then; the phase is released (`models.engine.phases`). Raises
    `IllegalTransition` when the run left the phase, or (found == `phase`) when the phase has
    been deferred `max_deferrals` times already.
    """
    due = utcnow() + timedelta(seconds=retry_after_s)
    run = guarded(
        session,
        Run,
        run_id,
        to=phase,
        expected=[phase],
        where=[col(Run.deferrals) < max_deferrals],
        why=f"with fewer than {max_deferrals} deferrals",
        deferrals=Run.deferrals + 1,
        updated_at=due,
        phase_lease_expires_at=None,
    )
    record_event(
        session,
        run_id,
        "run.deferred",
        phase=phase,
        retry_after_s=retry_after_s,
        due_at=due.isoformat(),
        deferrals=run.deferrals,
        error=error,
    )
    return run


def succeed_run(session: Session, run_id: int, *, final_result: dict[str, Any]) -> Run:
    """synthesizing -> succeeded, with the final answer."""
    return move_run(
        session,
        run_id,
        to="succeeded",
        expected=["synthesizing"],
        final_result=final_result,
        finished_at=utcnow(),
    )


def escalate(
    session: Session,
    run_id: int,
    *,
    expected: str,
    reason: str,
    step_id: int | None = None,
    detail: dict[str, Any] | None = None,
    timeout_s: float | None = None,
) -> Escalation | None:
    """`expected` -> waiting_review, and open an escalation for the run's current plan version.

    The escalation's deadline is `timeout_s` seconds from now (default
    `AGENTQ_ESCALATION_TIMEOUT_S`); the webhooks of `escalation.opened` are notified
    (`models.engine.notifications`). At most one escalation is open per run and plan version (a
    partial unique index); a second attempt returns None and opens nothing.
    """
    run = move_run(session, run_id, to="waiting_review", expected=[expected])
    now = utcnow()
    timeout_s = get_settings().escalation_timeout_s if timeout_s is None else timeout_s
    stmt = (
        insert(Escalation)
        .values(
            run_id=run_id,
            plan_version=run.plan_version,
            step_id=step_id,
            reason=reason,
            detail=detail or {},
            status="open",
            created_at=now,
            deadline_at=now + timedelta(seconds=timeout_s),
        )
        .on_conflict_do_nothing()
        .returning(col(Escalation.id))
    )
    escalation_id = session.scalar(stmt)
    record_event(session, run_id, "escalation.opened", step_id=step_id, reason=reason)
    escalation = session.get(Escalation, escalation_id) if escalation_id else None
    if escalation is not None:
        notifications.enqueue(session, "escalation.opened", run, escalation=escalation)
    return escalation
