"""Every state change of runs, steps and escalations: each one guarded UPDATE, in one place.

A transition is `UPDATE ... SET status = :to WHERE id = :id AND status IN (:expected) RETURNING *`
(DESIGN.md, invariant 1). When the row is in another state nothing changes and `IllegalTransition`
says which row, the state it found and the state it expected; callers that may see a message twice
catch it and move on. Each transition appends to the run's timeline in the same transaction. The
caller owns the transaction (these functions never commit). The two hot transitions of a step,
its claim and the end of an attempt (succeeded or failed), are hand-written SQL beside these, in
`models.leases`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert
from sqlmodel import Session, col, select

from models import sql
from models.errors import BudgetExhausted, ClaimedByAnother, IllegalTransition
from models.events import record_event as record_event
from models.settings import get_settings
from models.states import MOVES, RUN_ACTIVE, STEP_NOT_STARTED, WITHDRAWN
from models.tables import Escalation, Run, Step, StepAttempt, utcnow

T = TypeVar("T", Run, Step, Escalation)
WITHDRAWN_BY = "agentq"  # who decides an escalation withdrawn: no reviewer did


def _guarded(
    session: Session,
    model: type[T],
    row_id: int,
    *,
    to: str,
    expected: Iterable[str],
    where: Iterable[Any] = (),
    why: str = "",
    **values: Any,
) -> T:
    table = str(model.__tablename__)
    expected = tuple(expected)
    for found in expected:
        if (found, to) not in MOVES[table]:
            raise ValueError(f"{table}: {found} -> {to} is not a legal move")
    table_model: Any = model
    where = tuple(where)
    row: T | None = None
    if not where and not any(isinstance(v, sa.ClauseElement) for v in values.values()):
        # the common case: named SQL on the driver (models.sql, a third of the ORM's CPU)
        row = sql.update_status(session, model, row_id, to=to, expected=expected, values=values)
    else:
        stmt = sa.update(model).where(table_model.id == row_id, table_model.status.in_(expected))
        stmt = stmt.where(*where).values(status=to, **values).returning(model)
        options = {"populate_existing": True, "synchronize_session": False}
        row = session.scalars(stmt.execution_options(**options)).one_or_none()
    if row is None:
        found_status = session.scalar(sa.select(table_model.status).where(table_model.id == row_id))
        listed = " or ".join(repr(s) for s in expected)
        wanted = ("active" if set(expected) == RUN_ACTIVE else listed) + (f" {why}" if why else "")
        raise IllegalTransition(table, row_id, found_status, wanted)
    return row


def _run(session: Session, run_id: int, *, to: str, expected: Iterable[str], **values: Any) -> Run:
    """A run's move to another status; the phase it was in ends with it, so whatever attempt held
    that phase holds nothing now (`models.phases`)."""
    values = {"updated_at": utcnow(), "phase_lease_expires_at": None, **values}
    run = _guarded(session, Run, run_id, to=to, expected=expected, **values)
    record_event(session, run_id, f"run.{to}", **{k: v for k, v in values.items() if k == "error"})
    return run


# --- runs --------------------------------------------------------------------------------------


def start_planning(session: Session, run_id: int) -> Run:
    """queued -> planning."""
    return _run(session, run_id, to="planning", expected=["queued"], deferrals=0)


def requeue_run(session: Session, run_id: int) -> Run:
    """waiting_review -> queued: a reviewer let a run with no plan yet try planning again."""
    return _run(session, run_id, to="queued", expected=["waiting_review"])


def resume_run(session: Session, run_id: int, *, expected: str, plan_version: int) -> Run:
    """`expected` (planning, replanning, waiting_review, queued) -> running, on `plan_version`."""
    return _run(session, run_id, to="running", expected=[expected], plan_version=plan_version)


def start_replanning(session: Session, run_id: int, *, source: str = "running") -> Run:
    """running -> replanning (or synthesizing -> replanning, `source`, when a goal check found
    the goal not met), charging one replan to the budget in the same UPDATE.

    Raises `BudgetExhausted` when the run is in `source` but its replan budget is spent, and
    `IllegalTransition` when it is not in `source`.
    """
    try:
        run = _guarded(
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
    synthesis wrote before its goal check (`models.phases.keep_answer`) is cleared."""
    return _run(
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
    the phase succeeds before then; the phase is released (`models.phases`). Raises
    `IllegalTransition` when the run left the phase, or (found == `phase`) when the phase has
    been deferred `max_deferrals` times already.
    """
    due = utcnow() + timedelta(seconds=retry_after_s)
    run = _guarded(
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
    return _run(
        session,
        run_id,
        to="succeeded",
        expected=["synthesizing"],
        final_result=final_result,
        finished_at=utcnow(),
    )


def fail_run(session: Session, run_id: int, *, error: str) -> Run:
    """waiting_review -> failed: a reviewer rejected the run."""
    return _run(
        session, run_id, to="failed", expected=["waiting_review"], error=error, finished_at=utcnow()
    )


def cancel_run(session: Session, run_id: int) -> Run:
    """Any active status -> cancelled; pending, ready and queued steps are cancelled with it,
    and an escalation still waiting for a reviewer is decided `withdrawn` (nothing is left to
    decide)."""
    run = _run(session, run_id, to="cancelled", expected=RUN_ACTIVE, finished_at=utcnow())
    for step in session.exec(
        select(Step).where(Step.run_id == run_id, col(Step.status).in_(STEP_NOT_STARTED))
    ):
        cancel_step(session, step.id or 0)
    waiting = select(Escalation.id).where(
        Escalation.run_id == run_id,
        col(Escalation.status).in_(["open", "claimed"]),
    )
    for escalation_id in session.exec(waiting):
        decide_escalation(
            session,
            escalation_id or 0,
            decision=WITHDRAWN,
            reviewer=WITHDRAWN_BY,
            comment="the run was cancelled",
            override_claim=True,
        )
    return run


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
    `AGENTQ_ESCALATION_TIMEOUT_S`). At most one escalation is open per run and plan version (a
    partial unique index); a second attempt returns None and opens nothing.
    """
    run = _run(session, run_id, to="waiting_review", expected=[expected])
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
    return session.get(Escalation, escalation_id) if escalation_id else None


def grant_budget(session: Session, run_id: int, *, what: str) -> Run:
    """Give a run waiting for review its `what` budget again ("tokens", "cost" or "wall_time").

    Tokens and cost: the limit becomes what was used plus the original limit, or plus the default
    budget (`AGENTQ_DEFAULT_TOKEN_BUDGET`, `AGENTQ_DEFAULT_COST_BUDGET_USD`) when that is larger:
    a run submitted with a budget too small for one model call can go on once approved. Wall
    time: the deadline moves to now plus the run's wall-time budget. Only a run in
    `waiting_review` can be granted.
    """
    values: dict[str, Any]
    settings = get_settings()
    if what == "tokens":
        more = sa.func.greatest(Run.tokens_limit, settings.default_token_budget)
        values = {"tokens_limit": Run.tokens_used + more}
    elif what == "cost":
        more = sa.func.greatest(Run.cost_limit_usd, settings.default_cost_budget_usd)
        values = {"cost_limit_usd": Run.cost_used_usd + more}
    else:
        interval = sa.func.make_interval(0, 0, 0, 0, 0, 0, Run.wall_time_limit_s)
        values = {"deadline_at": utcnow() + interval}
    run = _guarded(session, Run, run_id, to="waiting_review", expected=["waiting_review"], **values)
    record_event(session, run_id, "run.budget_granted", budget=what)
    return run


# --- steps -------------------------------------------------------------------------------------


def ready_step(session: Session, step_id: int) -> Step:
    """pending -> ready: the coordinator chose it; it waits for a dispatch slot of its user
    (`models.dispatch`). `queued_at` is when it became ready (the reconciler's clock)."""
    step = _guarded(session, Step, step_id, to="ready", expected=["pending"], queued_at=utcnow())
    record_event(session, step.run_id, "step.ready", step_id=step_id)
    return step


def enqueue_step(session: Session, step_id: int) -> Step:
    """ready -> queued: a dispatch slot of its user is free; its message is sent after commit."""
    step = _guarded(session, Step, step_id, to="queued", expected=["ready"], queued_at=utcnow())
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
    step = _guarded(
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


def failed_attempts(step: Step) -> int:
    """Attempts of `step` that count against `max_attempts`: claims less rate-limit deferrals."""
    return step.attempt - step.deferrals


def expire_lease(session: Session, step_id: int) -> Step:
    """running with an expired lease -> queued, or -> failed when its attempts are spent."""
    now = utcnow()
    expired = [Step.lease_expires_at < now]  # type: ignore[operator]
    step = session.get(Step, step_id)
    spent = step is not None and failed_attempts(step) >= step.max_attempts
    error = f"lease expired at attempt {step.attempt if step else '?'}"
    values: dict[str, Any] = (
        {"error": error, "finished_at": now} if spent else {"queued_at": now, "error": error}
    )
    step = _guarded(
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


def cancel_step(session: Session, step_id: int) -> Step:
    """pending | ready | queued -> cancelled (a reviewer removed it, or the run was cancelled)."""
    step = _guarded(session, Step, step_id, to="cancelled", expected=sorted(STEP_NOT_STARTED))
    record_event(session, step.run_id, "step.cancelled", step_id=step_id)
    return step


# --- escalations -------------------------------------------------------------------------------


def claim_escalation(
    session: Session, escalation_id: int, *, reviewer: str, token_id: int | None = None
) -> Escalation:
    """open -> claimed by `reviewer`, through the API token `token_id` (None: the CLI). Only that
    token (or, for None, the CLI acting as `reviewer`) decides or releases it (`_holds`)."""
    esc = _guarded(
        session,
        Escalation,
        escalation_id,
        to="claimed",
        expected=["open"],
        claimed_by=reviewer,
        claimed_by_token_id=token_id,
        claimed_at=utcnow(),
    )
    record_event(session, esc.run_id, "escalation.claimed", reviewer=reviewer)
    return esc


def _holds(reviewer: str, token_id: int | None) -> Any:
    """The claim is this caller's: a token's claims are tied to the token, not its name (a new
    token with a revoked one's name does not inherit its claims: issue 9); the CLI, which has no
    token, holds the claims it made under its `$AGENTQ_REVIEWER` name."""
    if token_id is not None:
        return col(Escalation.claimed_by_token_id) == token_id
    return sa.and_(
        col(Escalation.claimed_by) == reviewer, col(Escalation.claimed_by_token_id).is_(None)
    )


def _claimed_by_another(
    session: Session, escalation_id: int, reviewer: str, what: str
) -> ClaimedByAnother:
    """The refusal of `what` ("decide it") on a claim the caller does not hold, naming the
    holder, and saying so when the holder has the caller's name but another token."""
    holder, holder_token = session.execute(
        sa.select(col(Escalation.claimed_by), col(Escalation.claimed_by_token_id)).where(
            col(Escalation.id) == escalation_id
        )
    ).one()
    if holder != reviewer:
        return ClaimedByAnother(
            f"escalation {escalation_id} is claimed by {holder}; only {holder} can {what}"
        )
    if holder_token is None:
        return ClaimedByAnother(
            f"escalation {escalation_id} is claimed by {holder} through the CLI; only the CLI "
            f"(`agentq review` as {holder}) can {what}, not an API token"
        )
    return ClaimedByAnother(
        f"escalation {escalation_id} is claimed by {holder} through API token {holder_token}; "
        f"only that token can {what}, not another token with the same name"
    )


def decide_escalation(
    session: Session,
    escalation_id: int,
    *,
    decision: str,
    reviewer: str,
    comment: str | None = None,
    answer: dict[str, Any] | None = None,
    override_claim: bool = False,
    token_id: int | None = None,
) -> Escalation:
    """open, or claimed by this caller (`_holds`: the API token `token_id`, or with None the CLI
    as `reviewer`) -> decided. A second decision raises `IllegalTransition`, a decision on a
    claim the caller does not hold `ClaimedByAnother`; either changes nothing. `override_claim`
    decides it whoever holds it (a passed deadline does not wait for a claim)."""
    mine = [sa.or_(col(Escalation.status) == "open", _holds(reviewer, token_id))]
    try:
        esc = _guarded(
            session,
            Escalation,
            escalation_id,
            to="decided",
            expected=["open", "claimed"],
            where=[] if override_claim else mine,
            why="",
            decision=decision,
            decided_by=reviewer,
            decided_by_token_id=token_id,
            decided_at=utcnow(),
            comment=comment,
            answer=answer,
        )
    except IllegalTransition as exc:
        if exc.found == "claimed":
            raise _claimed_by_another(session, escalation_id, reviewer, "decide it") from exc
        raise
    record_event(
        session,
        esc.run_id,
        "escalation.decided",
        step_id=esc.step_id,
        decision=decision,
        reviewer=reviewer,
        **({"comment": comment} if comment else {}),
    )
    return esc


def release_escalation(
    session: Session,
    escalation_id: int,
    *,
    reviewer: str,
    force: bool = False,
    token_id: int | None = None,
    reason: str | None = None,
) -> Escalation:
    """claimed -> open, by the caller who claimed it (`_holds`: the API token `token_id`, or with
    None the CLI as `reviewer`), or by anyone with `force` (a claimer who vanished; a revoked
    token, `reason` says so in the event). Raises `ClaimedByAnother` for someone else without
    `force`, `IllegalTransition` when the escalation is not claimed; either way nothing
    changes."""
    holder = session.scalar(  # locked: the claimer recorded is the one whose claim ends
        sa.select(col(Escalation.claimed_by))
        .where(col(Escalation.id) == escalation_id)
        .with_for_update()
    )
    where = [] if force else [_holds(reviewer, token_id)]
    try:
        esc = _guarded(
            session,
            Escalation,
            escalation_id,
            to="open",
            expected=["claimed"],
            where=where,
            claimed_by=None,
            claimed_by_token_id=None,
            claimed_at=None,
        )
    except IllegalTransition as exc:
        if exc.found == "claimed":
            raise _claimed_by_another(
                session, escalation_id, reviewer, "release it, or anyone with --force"
            ) from exc
        raise
    detail: dict[str, Any] = {"claimer": holder, "reviewer": reviewer, "forced": force}
    if reason:
        detail["reason"] = reason
    record_event(session, esc.run_id, "escalation.released", **detail)
    return esc


def pass_escalation_deadline(
    session: Session, escalation_id: int, *, now: datetime, action: str
) -> Escalation | None:
    """Mark an undecided escalation whose deadline is at or before `now` as having passed it,
    once, and record `escalation.deadline_passed` with `action` ("reject" or "wait"). Its status
    does not change. Returns None, changing nothing, when it is decided, its deadline is later,
    or the passing was recorded already (another beat got there first)."""
    stmt = (
        sa.update(Escalation)
        .where(
            col(Escalation.id) == escalation_id,
            col(Escalation.status).in_(["open", "claimed"]),
            col(Escalation.deadline_at) <= now,
            col(Escalation.deadline_passed_at).is_(None),
        )
        .values(deadline_passed_at=now)
        .returning(Escalation)
        .execution_options(populate_existing=True, synchronize_session=False)
    )
    esc = session.scalars(stmt).one_or_none()
    if esc is not None:
        record_event(
            session,
            esc.run_id,
            "escalation.deadline_passed",
            step_id=esc.step_id,
            escalation_id=escalation_id,
            deadline_at=esc.deadline_at.isoformat() if esc.deadline_at else None,
            action=action,
            status=esc.status,
            **({"claimed_by": esc.claimed_by} if esc.claimed_by else {}),
        )
    return esc


def lock_run(session: Session, run_id: int) -> Run | None:
    """The run row, locked `FOR UPDATE` until the transaction ends: one coordinator at a time."""
    return session.exec(
        select(Run)
        .where(Run.id == run_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
