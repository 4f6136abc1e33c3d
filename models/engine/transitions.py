"""What reviewers and commands do to runs, steps and escalations: cancel, requeue, resume, fail,
grant a budget, remove a step; claim, decide and release an escalation, and mark its deadline
passed; and the run's row lock every one of them takes first.

Each is one guarded UPDATE (`models.engine.guards`, DESIGN.md invariant 1) with its event in the
run's timeline, in the caller's transaction (these functions never commit). The engine's own moves
are `models.engine.run_transitions` (a run's phases, escalation) and
`models.engine.step_transitions` (a step's lifecycle); `resume_run`, `cancel_step` and `lock_run`
are shared with it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.engine import notifications
from models.engine.events import record_event
from models.engine.guards import guarded, move_run
from models.errors import ClaimedByAnother, IllegalTransition
from models.states import RUN_ACTIVE, STEP_CANCELLABLE, WITHDRAWN
from models.tables import Escalation, Run, Step, utcnow

WITHDRAWN_BY = "agentq"  # who decides an escalation withdrawn: no reviewer did

# --- runs --------------------------------------------------------------------------------------


def requeue_run(session: Session, run_id: int) -> Run:
    """waiting_review -> queued: a reviewer let a run with no plan yet try planning again."""
    return move_run(session, run_id, to="queued", expected=["waiting_review"])


def resume_run(session: Session, run_id: int, *, expected: str, plan_version: int) -> Run:
    """`expected` (planning, replanning, waiting_review, queued) -> running, on `plan_version`."""
    return move_run(session, run_id, to="running", expected=[expected], plan_version=plan_version)


def fail_run(session: Session, run_id: int, *, error: str) -> Run:
    """waiting_review -> failed: a reviewer rejected the run."""
    return move_run(
        session, run_id, to="failed", expected=["waiting_review"], error=error, finished_at=utcnow()
    )


def cancel_run(session: Session, run_id: int) -> Run:
    """Any active status -> cancelled; pending, ready and queued steps are cancelled with it,
    and an escalation still waiting for a reviewer is decided `withdrawn` (nothing is left to
    decide)."""
    run = move_run(session, run_id, to="cancelled", expected=RUN_ACTIVE, finished_at=utcnow())
    for step in session.exec(
        select(Step).where(Step.run_id == run_id, col(Step.status).in_(STEP_CANCELLABLE))
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


# --- steps -------------------------------------------------------------------------------------


def cancel_step(session: Session, step_id: int) -> Step:
    """pending | ready | queued | waiting_approval | waiting_child -> cancelled (a reviewer
    removed it, or the run was cancelled)."""
    step = guarded(session, Step, step_id, to="cancelled", expected=sorted(STEP_CANCELLABLE))
    record_event(session, step.run_id, "step.cancelled", step_id=step_id)
    return step


# --- escalations -------------------------------------------------------------------------------


def claim_escalation(
    session: Session, escalation_id: int, *, reviewer: str, token_id: int | None = None
) -> Escalation:
    """open -> claimed by `reviewer`, through the API token `token_id` (None: the CLI). Only that
    token (or, for None, the CLI acting as `reviewer`) decides or releases it (`_holds`)."""
    esc = guarded(
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
        esc = guarded(
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
        esc = guarded(
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
    once, and record `escalation.deadline_passed` with `action` ("reject" or "wait"), notifying
    its webhooks (`models.engine.notifications`). Its status does not change. Returns None, changing
    nothing, when it is decided, its deadline is later, or the passing was recorded already
    (another beat got there first)."""
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
        run = session.get(Run, esc.run_id)
        if run is not None:
            notifications.enqueue(session, "escalation.deadline_passed", run, escalation=esc)
    return esc


def lock_run(session: Session, run_id: int) -> Run | None:
    """The run row, locked `FOR UPDATE` until the transaction ends: one coordinator at a time."""
    return session.exec(
        select(Run)
        .where(Run.id == run_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
