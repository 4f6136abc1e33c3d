"""`/api/v1/reviews`: the human-review queue. List, read, claim, release, and decide.

Reviewer and admin tokens only. Decisions and claims are recorded under the token's name (name a
reviewer's token after them, as `$AGENTQ_REVIEWER` names them in the CLI) and its id. Claims take
the oldest open escalation `FOR UPDATE SKIP LOCKED` (`models.review.reviews.claim_next`), so two
reviewers never get the same one; an escalation claimed through one token can be decided or
released only through that token (a new token with the same name gets 409), or released by an
admin. A decision on an
escalation already decided is a 409 and changes nothing (its transaction rolls back whole).
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response, status
from sqlmodel import Session

from api.auth import Reviewer
from api.responses import BudgetStanding, DecisionOut, ReviewOut, StepOut
from api.run_views import escalation_out, run_out
from api.schemas import PG_INT_MAX, Approve, Edit, Reject, Respond
from api.token_limits import LIMITED, REVIEWS_PAGE_FREE, charge_page
from models.db import session_scope
from models.engine import budget_grants, stack_limits
from models.engine.runs import get_run, pinned_facts
from models.errors import ClaimedByAnother, InvalidInput
from models.front import commands, queries
from models.review import escalations
from models.settings import get_settings
from models.tables import Escalation, Run, Step, utcnow

router = APIRouter(prefix="/reviews", tags=["reviews"])
EscalationId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Escalation id.")]
Which = Literal["undecided", "open", "claimed", "decided", "all"]


def review_out(session: Session, esc: Escalation) -> ReviewOut:
    """The escalation with its run, failed step, the run's pinned facts and, undecided, the
    spent budget it is about (`budget_standing`)."""
    step = session.get(Step, esc.step_id) if esc.step_id else None
    run = get_run(session, esc.run_id)
    return ReviewOut(
        escalation=escalation_out(esc),
        run=run_out(run),
        failed_step=StepOut.model_validate(step) if step is not None else None,
        pinned_facts=pinned_facts(session, esc.run_id),
        budget=budget_standing(session, esc, run),
    )


def budget_standing(session: Session, esc: Escalation, run: Run) -> BudgetStanding | None:
    """The spent budget an undecided escalation is about, under the stack's ceilings
    (`models.engine.budget_grants.spent`); None otherwise."""
    if esc.status == "decided":
        return None
    limits = stack_limits.effective(session, get_settings())
    found = budget_grants.spent(session, esc, run, settings=limits, now=utcnow())
    if found is None:
        return None
    return BudgetStanding(
        name=found.name,
        used=found.used,
        limit=found.limit,
        original_limit=found.original,
        ceiling=None if math.isinf(found.ceiling) else found.ceiling,  # JSON has no infinity
        ceiling_setting=found.setting,
        default_limit=found.default,
    )


@router.get("", response_model=list[ReviewOut], summary="The review queue", responses=LIMITED)
def list_reviews(
    principal: Reviewer,
    which: Annotated[Which, Query(alias="status", description="undecided: open or claimed.")] = (
        "undecided"
    ),
    mine: Annotated[bool, Query(description="Only those claimed through this token.")] = False,
    order: Annotated[Literal["oldest", "newest"], Query(description="By age.")] = "oldest",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ReviewOut]:
    """Escalations by age (oldest first unless `order=newest`), by status, or claimed by you.
    A page over 100 is a costly read (429 beyond the token's `AGENTQ_COSTLY_READS_PER_MINUTE`)."""
    charge_page(principal, limit, REVIEWS_PAGE_FREE)
    with session_scope() as session:
        rows = queries.escalations(
            session,
            which=which,
            token_id=principal.token_id if mine else None,
            newest_first=order == "newest",
            limit=limit,
        )
        return [review_out(session, e) for e in rows]


# `:int`: `GET /reviews/claim` is then no escalation id but the claim route's path, which
# answers 405 with `Allow: POST` (the spec's word) instead of 422 for an id that is not a number.
@router.get("/{escalation_id:int}", response_model=ReviewOut, summary="One escalation")
def read_review(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Why the run escalated: the failed step and its error, the run and its spend, the pinned
    facts, and the decision once there is one. 404 when it does not exist."""
    with session_scope() as session:
        return review_out(session, escalations.get_escalation(session, escalation_id))


@router.post(
    "/claim",
    response_model=ReviewOut,
    responses={204: {"description": "The queue has no open escalation."}},
    summary="Claim the oldest open escalation",
)
def claim_next(principal: Reviewer) -> ReviewOut | Response:
    """Claim the oldest open escalation no other reviewer holds (`FOR UPDATE SKIP LOCKED`);
    204 when there is none."""
    out = commands.claim_next(
        reviewer=principal.name, token_id=principal.token_id, describe=_review_or_none
    )
    return Response(status_code=status.HTTP_204_NO_CONTENT) if out is None else out


def _review_or_none(session: Session, esc: Escalation | None) -> ReviewOut | None:
    return None if esc is None else review_out(session, esc)


@router.post("/{escalation_id}/claim", response_model=ReviewOut, summary="Claim one escalation")
def claim(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Claim this escalation; 409 when it is claimed or decided already (nothing changes)."""
    return commands.claim(
        escalation_id, reviewer=principal.name, token_id=principal.token_id, describe=review_out
    )


@router.post("/{escalation_id}/release", response_model=ReviewOut, summary="Release a claim")
def release(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Put a claimed escalation back in the queue: your own claim, or (admin) anyone's. 409 when
    it is not claimed, or claimed by another reviewer (whom the message names)."""
    try:
        return commands.release(
            escalation_id,
            reviewer=principal.name,
            force=principal.role == "admin",
            token_id=principal.token_id,
            describe=review_out,
        )
    except ClaimedByAnother as exc:
        if exc.holder == principal.name:  # the same name through another token: say which
            raise
        raise ClaimedByAnother(
            f"escalation {escalation_id} is claimed by {exc.holder}; only {exc.holder} or an "
            "admin token can release it"
        ) from exc


def decision_out(session: Session, esc: Escalation, run: Run) -> DecisionOut:
    """What a decision returns: the escalation as decided and the run as it is now; `notified`
    is filled in once the follow-up was sent, after the commit."""
    session.refresh(esc)
    return DecisionOut(
        escalation=escalation_out(esc),
        run=run_out(get_run(session, run.id or 0)),
        notified=False,
        said=budget_grants.describe(esc.granted or {}),
    )


def _sent(done: commands.Done[DecisionOut]) -> DecisionOut:
    done.seen.notified = done.notified
    return done.seen


@router.post("/{escalation_id}/approve", response_model=DecisionOut, summary="Approve")
def approve(
    escalation_id: EscalationId, principal: Reviewer, body: Approve | None = None
) -> DecisionOut:
    """Retry the failed step once more (or re-plan when there was no plan, or carry on). The
    body (`{"comment", "budget"}`) is optional. `budget` sets new limits (`{"tokens": N,
    "cost_usd", "wall_time_s", "replans"}`), each at most the operator's ceiling (400 naming
    `budget.<name>`) and at least what the run spent (409 naming it: the run's state decides);
    a spent budget left out gets the default, spent plus its original limit (`GET` the
    escalation: `budget.default_limit`). The answer's `said` and `escalation.granted` state
    the limits set; the run's timeline records them (`run.budget_granted`). 409 when already
    decided."""
    comment = body.comment if body is not None else None
    chosen = body.budget.model_dump(exclude_none=True) if body and body.budget else {}
    return _sent(
        commands.approve(
            escalation_id,
            reviewer=principal.name,
            comment=comment,
            budget=chosen,
            token_id=principal.token_id,
            describe=decision_out,
        )
    )


@router.post("/{escalation_id}/reject", response_model=DecisionOut, summary="Reject")
def reject(escalation_id: EscalationId, body: Reject, principal: Reviewer) -> DecisionOut:
    """The run fails with the comment (required); its steps not yet run are cancelled. 409 when
    already decided."""
    return _sent(
        commands.reject(
            escalation_id,
            reviewer=principal.name,
            comment=body.comment,
            token_id=principal.token_id,
            describe=decision_out,
        )
    )


@router.post("/{escalation_id}/respond", response_model=DecisionOut, summary="Answer")
def respond(escalation_id: EscalationId, body: Respond, principal: Reviewer) -> DecisionOut:
    """Answer what the run could not find; it becomes the failed step's result (with no failed
    step, the pinned fact `reviewer_answer`, set by you). It is run state, not the user's
    memory, unless `remember` (then a fact with source `reviewer:<name>`, when the run ends).
    400 for a null or empty answer; 409 when already decided."""
    if body.answer is None or body.answer == "" or body.answer == {}:
        raise InvalidInput("answer: must be a JSON object or a value, not null or empty")
    return _sent(
        commands.respond(
            escalation_id,
            reviewer=principal.name,
            answer=json.dumps(body.answer),
            comment=body.comment,
            remember=body.remember,
            token_id=principal.token_id,
            describe=decision_out,
        )
    )


@router.post(
    "/{escalation_id}/edit", response_model=DecisionOut, summary="Edit the plan or a gated call"
)
def edit(escalation_id: EscalationId, body: Edit, principal: Reviewer) -> DecisionOut:
    """Your steps replace every step that has not run yet (add, remove, reorder, rewrite), in
    the failed step's place; their `after` may also name the steps that ran or still run. They
    are checked first (tools, arguments, pinned facts, the graph they make with the kept steps,
    references only to steps they wait for; 400 naming the step and field). For an
    `approval_required` escalation, `arguments` replace the gated call's (checked against the
    tool's schema; 400 naming `arguments`). 409 when already decided."""
    return _sent(
        commands.edit(
            escalation_id,
            reviewer=principal.name,
            plan=None if body.plan is None else body.plan.model_dump(),
            arguments=body.arguments,
            comment=body.comment,
            token_id=principal.token_id,
            describe=decision_out,
        )
    )
