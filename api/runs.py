"""`/api/v1/runs`: submit a goal, list runs, read one run whole, cancel one.

A submitter token sees and acts on its own user's runs only: another user's run is a 404, as if
it did not exist. Reviewers read every run; admins do everything. Each write is one transaction
(`session_scope`); the coordinator's message is sent after the commit.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status
from sqlmodel import Session, col, select

from api.auth import AnyPrincipal, Principal, Submitter
from api.responses import (
    EscalationOut,
    EventOut,
    PlanVersionOut,
    RunDetail,
    RunOut,
    Spend,
    StepOut,
    SubmittedOut,
)
from api.schemas import NO_NUL_PATTERN, PG_INT_MAX, RunStatus, RunSubmit
from models import queue, reviews, transitions
from models.db import session_scope
from models.errors import InvalidInput, NotFound
from models.plans import parse_plan
from models.queue import TASK_COORDINATE
from models.runs import USER_ID_MAX_CHARS, get_run, pinned_facts, submit_run
from models.settings import get_settings
from models.tables import Escalation, PlanVersion, Run, RunEvent, Step, utcnow
from worker.tools import argument_problems, configured_tool_names

router = APIRouter(prefix="/runs", tags=["runs"])
RunId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Run id.")]


def run_out(run: Run) -> RunOut:
    """The listed view of a run."""
    return RunOut(
        id=run.id or 0, user_id=run.user_id, goal=run.goal, status=run.status,
        plan_version=run.plan_version, provider=run.provider, error=run.error,
        created_at=run.created_at, updated_at=run.updated_at, finished_at=run.finished_at,
        spend=Spend(
            replans_used=run.replans_used, replans_limit=run.replans_limit,
            tokens_used=run.tokens_used, tokens_limit=run.tokens_limit,
            cost_used_usd=run.cost_used_usd, cost_limit_usd=run.cost_limit_usd,
            wall_time_limit_s=run.wall_time_limit_s, deadline_at=run.deadline_at,
            deferrals=run.deferrals,
        ),
    )  # fmt: skip


def escalation_out(esc: Escalation) -> EscalationOut:
    """An escalation with how long it has waited (until its decision), s."""
    out = EscalationOut.model_validate(esc)
    out.waiting_s = reviews.waiting_s(esc, utcnow())
    return out


def run_detail(session: Session, run: Run) -> RunDetail:
    """Everything about `run`: plan versions, steps, events, escalations, pinned facts."""
    run_id = run.id or 0
    versions = session.exec(
        select(PlanVersion).where(PlanVersion.run_id == run_id).order_by(col(PlanVersion.version))
    )
    steps = session.exec(select(Step).where(Step.run_id == run_id).order_by(col(Step.id)))
    events = session.exec(
        select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
    )
    escalations = session.exec(
        select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
    )
    plan_versions = [PlanVersionOut.model_validate(v) for v in versions]
    current = next((v.step_ids for v in plan_versions if v.version == run.plan_version), [])
    return RunDetail(
        **run_out(run).model_dump(),
        pinned_facts=pinned_facts(session, run_id),
        final_result=run.final_result,
        plan_versions=plan_versions,
        current_step_ids=current,
        steps=[StepOut.model_validate(s) for s in steps],
        events=[EventOut.model_validate(e) for e in events],
        escalations=[escalation_out(e) for e in escalations],
    )


def visible_run(session: Session, run_id: int, principal: Principal) -> Run:
    """The run, if the principal may see it; `NotFound` alike for missing and not yours."""
    run = session.get(Run, run_id)
    if run is None or not principal.can_read_user(run.user_id):
        raise NotFound(f"run {run_id} does not exist")
    return run


def submitting_user(body: RunSubmit, principal: Principal) -> str:
    """Whose run it is: a submitter's own user; for other roles, `user` is required."""
    if principal.role == "submitter":
        if body.user is not None and body.user != principal.user_id:
            raise InvalidInput(f"user: a submitter token submits only as {principal.user_id!r}")
        return principal.user_id or ""
    if body.user is None:
        raise InvalidInput(f"user: required with a {principal.role} token (whose run is it?)")
    return body.user


@router.post(
    "", status_code=status.HTTP_201_CREATED, response_model=SubmittedOut, summary="Submit a goal"
)
def submit(body: RunSubmit, principal: Submitter) -> SubmittedOut:
    """Submit a goal (status `queued`), or an explicit plan (status `running`, no planning call).

    The plan is checked against the registered tools, their arguments and the pinned facts before
    anything is written (400 naming the step and field). Submitter or admin.
    """
    user_id = submitting_user(body, principal)
    plan = None
    if body.plan is not None:
        plan = parse_plan(
            body.plan.model_dump(), tools=configured_tool_names(), facts=set(body.facts),
            check_args=argument_problems,
        )  # fmt: skip
    budgets = body.budgets
    with session_scope() as session:
        run = submit_run(
            session, settings=get_settings(), user_id=user_id, goal=body.goal, facts=body.facts,
            plan=plan, replans=budgets.replans, tokens=budgets.tokens, cost_usd=budgets.cost_usd,
            wall_time_s=budgets.wall_time_s,
        )  # fmt: skip
        detail = run_detail(session, run)
    return SubmittedOut(run=detail, notified=queue.try_send(TASK_COORDINATE, detail.id))


@router.get("", response_model=list[RunOut], summary="List runs, newest first")
def list_runs(
    principal: AnyPrincipal,
    status_: Annotated[RunStatus | None, Query(alias="status")] = None,
    user: Annotated[
        str | None, Query(min_length=1, max_length=USER_ID_MAX_CHARS, pattern=NO_NUL_PATTERN)
    ] = None,
    before: Annotated[int | None, Query(ge=1, le=PG_INT_MAX, description="Ids below.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 50,
) -> list[RunOut]:
    """Runs newest first, filtered by `status` and `user`; page with `before` (the last id seen).

    A submitter token lists only its own user's runs (another `user` gives an empty list).
    """
    stmt = select(Run).order_by(col(Run.id).desc()).limit(limit)
    if principal.role == "submitter":
        stmt = stmt.where(col(Run.user_id) == principal.user_id)
    if status_:
        stmt = stmt.where(col(Run.status) == status_)
    if user:
        stmt = stmt.where(col(Run.user_id) == user)
    if before:
        stmt = stmt.where(col(Run.id) < before)
    with session_scope() as session:
        return [run_out(r) for r in session.exec(stmt)]


@router.get("/{run_id}", response_model=RunDetail, summary="One run, whole")
def read_run(run_id: RunId, principal: AnyPrincipal) -> RunDetail:
    """The run with its plan versions, steps, events, escalations and spend. 404 when it does
    not exist or (for a submitter) is another user's."""
    with session_scope() as session:
        return run_detail(session, visible_run(session, run_id, principal))


@router.post("/{run_id}/cancel", response_model=RunDetail, summary="Cancel a run")
def cancel(run_id: RunId, principal: Submitter) -> RunDetail:
    """Cancel an active run: it ends `cancelled`, its steps not yet running are cancelled (a
    running step finishes, and nothing follows it). 409 when the run has ended already, with
    nothing changed. Submitter (own runs) or admin."""
    with session_scope() as session:
        visible_run(session, run_id, principal)
        transitions.lock_run(session, run_id)
        run = transitions.cancel_run(session, run_id)
        detail = run_detail(session, get_run(session, run.id or 0))
    queue.follow_up(run_id, detail.status)  # the cancelled run's episode is written
    return detail
