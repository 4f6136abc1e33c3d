"""`/api/v1/reviews`: the human-review queue. List, read, claim, release, and decide.

Reviewer and admin tokens only. Decisions and claims are recorded under the token's name (name a
reviewer's token after them, as `$AGENTQ_REVIEWER` names them in the CLI) and its id. Claims take
the oldest open escalation `FOR UPDATE SKIP LOCKED` (`models.reviews.claim_next`), so two
reviewers never get the same one; an escalation claimed through one token can be decided or
released only through that token (a new token with the same name gets 409), or released by an
admin. A decision on an
escalation already decided is a 409 and changes nothing (its transaction rolls back whole).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response, status
from sqlmodel import Session, col, select

from api.auth import Principal, Reviewer
from api.responses import DecisionOut, ReviewOut, StepOut
from api.runs import escalation_out, run_out
from api.schemas import PG_INT_MAX, Approve, Edit, Reject, Respond
from models import answers, queue, reviews, transitions
from models.db import session_scope
from models.errors import ClaimedByAnother, InvalidInput
from models.runs import get_run, pinned_facts
from models.settings import get_settings
from models.tables import Escalation, Run, Step
from models.tools import argument_problems, configured_tool_names, declared_returns

router = APIRouter(prefix="/reviews", tags=["reviews"])
EscalationId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Escalation id.")]
Which = Literal["undecided", "open", "claimed", "decided", "all"]


def review_out(session: Session, esc: Escalation) -> ReviewOut:
    """The escalation with its run, failed step and the run's pinned facts."""
    step = session.get(Step, esc.step_id) if esc.step_id else None
    return ReviewOut(
        escalation=escalation_out(esc),
        run=run_out(get_run(session, esc.run_id)),
        failed_step=StepOut.model_validate(step) if step is not None else None,
        pinned_facts=pinned_facts(session, esc.run_id),
    )


@router.get("", response_model=list[ReviewOut], summary="The review queue")
def list_reviews(
    principal: Reviewer,
    which: Annotated[Which, Query(alias="status", description="undecided: open or claimed.")] = (
        "undecided"
    ),
    mine: Annotated[bool, Query(description="Only those claimed through this token.")] = False,
    order: Annotated[Literal["oldest", "newest"], Query(description="By age.")] = "oldest",
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[ReviewOut]:
    """Escalations by age (oldest first unless `order=newest`), by status, or claimed by you."""
    stmt = select(Escalation)
    if which == "undecided":
        stmt = stmt.where(col(Escalation.status) != "decided")
    elif which != "all":
        stmt = stmt.where(col(Escalation.status) == which)
    if mine:
        stmt = stmt.where(col(Escalation.claimed_by_token_id) == principal.token_id)
    by_age = col(Escalation.created_at)
    stmt = stmt.order_by(by_age if order == "oldest" else by_age.desc(), col(Escalation.id))
    with session_scope() as session:
        return [review_out(session, e) for e in session.exec(stmt.limit(limit))]


# `:int`: `GET /reviews/claim` is then no escalation id but the claim route's path, which
# answers 405 with `Allow: POST` (the spec's word) instead of 422 for an id that is not a number.
@router.get("/{escalation_id:int}", response_model=ReviewOut, summary="One escalation")
def read_review(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Why the run escalated: the failed step and its error, the run and its spend, the pinned
    facts, and the decision once there is one. 404 when it does not exist."""
    with session_scope() as session:
        return review_out(session, reviews.get_escalation(session, escalation_id))


@router.post(
    "/claim",
    response_model=ReviewOut,
    responses={204: {"description": "The queue has no open escalation."}},
    summary="Claim the oldest open escalation",
)
def claim_next(principal: Reviewer) -> ReviewOut | Response:
    """Claim the oldest open escalation no other reviewer holds (`FOR UPDATE SKIP LOCKED`);
    204 when there is none."""
    with session_scope() as session:
        esc = reviews.claim_next(session, reviewer=principal.name, token_id=principal.token_id)
        if esc is None:
            return Response(status_code=status.HTTP_204_NO_CONTENT)
        return review_out(session, esc)


@router.post("/{escalation_id}/claim", response_model=ReviewOut, summary="Claim one escalation")
def claim(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Claim this escalation; 409 when it is claimed or decided already (nothing changes)."""
    with session_scope() as session:
        reviews.get_escalation(session, escalation_id)
        esc = transitions.claim_escalation(
            session, escalation_id, reviewer=principal.name, token_id=principal.token_id
        )
        return review_out(session, esc)


@router.post("/{escalation_id}/release", response_model=ReviewOut, summary="Release a claim")
def release(escalation_id: EscalationId, principal: Reviewer) -> ReviewOut:
    """Put a claimed escalation back in the queue: your own claim, or (admin) anyone's. 409 when
    it is not claimed, or claimed by another reviewer (whom the message names)."""
    with session_scope() as session:
        try:
            esc = reviews.release(
                session,
                escalation_id,
                reviewer=principal.name,
                force=principal.role == "admin",
                token_id=principal.token_id,
            )
        except ClaimedByAnother as exc:
            holder = reviews.get_escalation(session, escalation_id).claimed_by
            if holder == principal.name:  # the same name through another token: say which
                raise
            raise ClaimedByAnother(
                f"escalation {escalation_id} is claimed by {holder}; only {holder} or an admin "
                "token can release it"
            ) from exc
        return review_out(session, esc)


def _decide(
    escalation_id: int, principal: Principal, apply: Callable[[Session, Escalation], Run]
) -> DecisionOut:
    """Apply one decision in one transaction, then send what comes next for the run
    (`queue.follow_up`: coordinate it, or remember it when the decision ended it)."""
    with session_scope() as session:
        esc = reviews.get_escalation(session, escalation_id)
        run = apply(session, esc)
        session.refresh(esc)
        out = DecisionOut(
            escalation=escalation_out(esc),
            run=run_out(get_run(session, run.id or 0)),
            notified=False,
        )
    out.notified = queue.follow_up(run.id or 0, out.run.status)
    return out


@router.post("/{escalation_id}/approve", response_model=DecisionOut, summary="Approve")
def approve(
    escalation_id: EscalationId, principal: Reviewer, body: Approve | None = None
) -> DecisionOut:
    """Retry the failed step once more (or re-plan when there was no plan, or carry on); a spent
    wall-time, token or cost budget is granted once more. The body (`{"comment"}`) is optional.
    409 when already decided."""
    comment = body.comment if body is not None else None
    return _decide(
        escalation_id,
        principal,
        lambda session, _esc: reviews.approve(
            session, escalation_id, reviewer=principal.name, comment=comment,
            max_attempts=get_settings().step_max_attempts, token_id=principal.token_id,
        ),
    )  # fmt: skip


@router.post("/{escalation_id}/reject", response_model=DecisionOut, summary="Reject")
def reject(escalation_id: EscalationId, body: Reject, principal: Reviewer) -> DecisionOut:
    """The run fails with the comment (required); its steps not yet run are cancelled. 409 when
    already decided."""
    return _decide(
        escalation_id,
        principal,
        lambda session, _esc: reviews.reject(
            session,
            escalation_id,
            reviewer=principal.name,
            comment=body.comment,
            token_id=principal.token_id,
        ),
    )


@router.post("/{escalation_id}/respond", response_model=DecisionOut, summary="Answer")
def respond(escalation_id: EscalationId, body: Respond, principal: Reviewer) -> DecisionOut:
    """Answer what the run could not find; it becomes the failed step's result (with no failed
    step, the pinned fact `reviewer_answer`, set by you). It is run state, not the user's
    memory, unless `remember` (then a fact with source `reviewer:<name>`, when the run ends).
    400 for a null or empty answer; 409 when already decided."""
    if body.answer is None or body.answer == "" or body.answer == {}:
        raise InvalidInput("answer: must be a JSON object or a value, not null or empty")
    text = json.dumps(body.answer)
    return _decide(
        escalation_id,
        principal,
        lambda session, esc: reviews.respond(
            session, escalation_id, reviewer=principal.name, comment=body.comment,
            answer=answers.answer_from_text(text, returns=declared_returns(esc.detail.get("tool"))),
            token_id=principal.token_id, remember=body.remember,
        ),
    )  # fmt: skip


@router.post("/{escalation_id}/edit", response_model=DecisionOut, summary="Edit the plan")
def edit(escalation_id: EscalationId, body: Edit, principal: Reviewer) -> DecisionOut:
    """Your steps replace every step that has not run yet (add, remove, reorder, rewrite), in
    the failed step's place; their `after` may also name the steps that ran or still run. They
    are checked first (tools, arguments, pinned facts, the graph they make with the kept steps,
    references only to steps they wait for; 400 naming the step and field). 409 when already
    decided."""
    return _decide(
        escalation_id,
        principal,
        lambda session, _esc: reviews.edit(
            session, escalation_id, reviewer=principal.name, plan=body.plan.model_dump(),
            tools=configured_tool_names(), check_args=argument_problems, comment=body.comment,
            max_attempts=get_settings().step_max_attempts, token_id=principal.token_id,
        ),
    )  # fmt: skip
