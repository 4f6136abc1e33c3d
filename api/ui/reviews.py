"""The review pages: the inbox, one escalation, and the reviewer's decisions.

Only reviewers and admins get here. Decisions call the same functions as `agentq review ...`
(`models.front.commands`), recorded under the token's name, and tell the coordinator after the
commit. A second decision (or one on another reviewer's claim) changes nothing and re-shows the page
with a 409 and what was decided; a plan edit that does not validate re-shows the form with the
error naming the field (400), with nothing stored. A decision's address opened as a page (a
reload after such a re-shown form) leads back to the escalation's page.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Final

from fastapi import APIRouter, Form, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.auth import Principal
from api.reviews import EscalationId
from api.ui import review_details
from api.ui.security import reviewer
from api.ui.templating import base_path, flash, render
from models.db import session_scope
from models.engine import budget_grants
from models.errors import (
    ClaimedByAnother,
    Conflict,
    IllegalTransition,
    InvalidInput,
    InvalidPlan,
)
from models.front import commands
from models.front.queries import last_event_id

router = APIRouter()
Text = Annotated[str, Form()]
SEE_OTHER: Final = 303  # after a POST, the browser GETs the page it is sent to
ACTIONS: Final = ("approve", "reject", "respond", "edit", "claim", "release")
Action = Annotated[str, Path(pattern=f"^({'|'.join(ACTIONS)})$")]


@router.get("/reviews", response_class=HTMLResponse)
def inbox_page(request: Request, tab: str = "open") -> HTMLResponse:
    """The review inbox: open, claimed, mine, decided; time waiting and time left."""
    principal = reviewer(request)
    shown = tab if tab in review_details.TABS else "open"
    with session_scope() as session:
        # first, before the rows it versions (`last_event_id`)
        version = last_event_id(session, kind_prefix="escalation.")
        items = review_details.inbox(session, tab=shown, me=principal.token_id)
        counts = review_details.tab_counts(session, me=principal.token_id)
    return render(
        request,
        "inbox.html",
        principal=principal,
        title="Review inbox",
        items=items,
        tab=shown,
        tabs=review_details.TABS,
        counts=counts,
        poll_url=f"{base_path(request)}/reviews/version.json",
        stream_url=f"{base_path(request)}/reviews/stream?after={version}",
        poll_version=version,
    )


@router.get("/reviews/version.json")
def inbox_version(request: Request) -> dict[str, int]:
    """The newest escalation event id: the inbox reloads when it changes."""
    reviewer(request)
    with session_scope() as session:
        return {"version": last_event_id(session, kind_prefix="escalation.")}


@router.get("/reviews/{escalation_id}", response_class=HTMLResponse)
def review_page(request: Request, escalation_id: EscalationId) -> HTMLResponse:
    """Why the run escalated, the failing step and its error, budgets, facts; the decisions."""
    return _review(request, reviewer(request), escalation_id)


@router.get("/reviews/{escalation_id}/{action}", include_in_schema=False)
def action_page(request: Request, escalation_id: EscalationId, action: Action) -> Response:
    """A decision's address opened as a page (a reload after a refused form, a bookmark): the
    escalation's page, rather than 405."""
    return RedirectResponse(f"{base_path(request)}/reviews/{escalation_id}", SEE_OTHER)


def _review(
    request: Request,
    principal: Principal,
    escalation_id: int,
    *,
    status_code: int = 200,
    problem: dict[str, str] | None = None,
    typed: dict[str, str] | None = None,
) -> HTMLResponse:
    with session_scope() as session:
        context = review_details.escalation_context(session, escalation_id)
    return render(
        request,
        "review.html",
        principal=principal,
        status_code=status_code,
        title=f"Escalation {escalation_id}",
        problem=problem,
        typed=typed or {},
        **context,
    )


ReviewAction = Callable[[Principal], commands.Done[Any]]


def _decide(
    request: Request,
    escalation_id: int,
    action: str,
    decision: ReviewAction,
    *,
    typed: dict[str, str],
    done: str,
) -> Response:
    """Apply `decision` (a `models.front.commands` decision: one transaction, then what comes next,
    `queue.follow_up`) and show the run."""
    principal = reviewer(request)
    try:
        decided = decision(principal)
    except (IllegalTransition, ClaimedByAnother) as exc:
        problem = {"action": action, "message": str(exc), "kind": "conflict"}
        return _review(request, principal, escalation_id, status_code=409, problem=problem)
    except (InvalidPlan, InvalidInput, Conflict) as exc:  # Conflict: a budget below the spend
        problem = {"action": action, "message": str(exc), "kind": "invalid"}
        code = 409 if isinstance(exc, Conflict) else 400
        return _review(
            request, principal, escalation_id, status_code=code, problem=problem, typed=typed
        )
    run_id = decided.run_id
    message = done.format(id=escalation_id, run=run_id)
    if isinstance(decided.seen, str) and decided.seen:
        message += f" Budgets set: {decided.seen}."
    if not decided.notified:
        message += " The broker could not be reached: the reconciler will send it later."
    flash(request, message)
    return RedirectResponse(f"{base_path(request)}/runs/{run_id}", status_code=SEE_OTHER)


@router.post("/reviews/{escalation_id}/approve")
def approve(
    request: Request,
    escalation_id: EscalationId,
    comment: Text = "",
    budget_name: Text = "",
    budget_limit: Text = "",
) -> Response:
    """Approve: retry the failed step once more (or re-plan, or carry on); `budget_limit`, if
    given, is the new limit of the spent budget `budget_name` (else its default), and the
    page the reviewer lands on says the limits set."""
    return _decide(
        request,
        escalation_id,
        "approve",
        lambda who: commands.approve(
            escalation_id,
            reviewer=who.name,
            comment=comment.strip() or None,
            budget=_chosen(budget_name, budget_limit),
            token_id=who.token_id,
            describe=lambda _session, esc, _run: budget_grants.describe(esc.granted or {}),
        ),
        typed={"approve_comment": comment, "budget_limit": budget_limit},
        done="Escalation {id} approved; run {run} resumes.",
    )


def _chosen(name: str, limit: str) -> dict[str, float]:
    """The budget form's new limit, `{name: limit}`, or {} when left empty; `InvalidInput`
    naming `budget.<name>` for text that is not a number."""
    if not limit.strip():
        return {}
    try:
        return {name: float(limit)}
    except ValueError:
        raise InvalidInput(f"budget.{name}: a number, got {limit!r}") from None


@router.post("/reviews/{escalation_id}/reject")
def reject(request: Request, escalation_id: EscalationId, comment: Text = "") -> Response:
    """Reject: the run fails with the comment (required)."""
    return _decide(
        request,
        escalation_id,
        "reject",
        lambda who: commands.reject(
            escalation_id, reviewer=who.name, comment=comment, token_id=who.token_id
        ),
        typed={"reject_comment": comment},
        done="Escalation {id} rejected; run {run} failed.",
    )


@router.post("/reviews/{escalation_id}/respond")
def respond(
    request: Request,
    escalation_id: EscalationId,
    answer: Text = "",
    comment: Text = "",
    remember: Text = "",
) -> Response:
    """Respond: the answer becomes the failed step's result; with the `remember` box ticked it
    also becomes a fact of the run's user, from this reviewer."""
    return _decide(
        request,
        escalation_id,
        "respond",
        lambda who: commands.respond(
            escalation_id,
            reviewer=who.name,
            answer=answer,
            comment=comment.strip() or None,
            remember=bool(remember),
            token_id=who.token_id,
        ),
        typed={"answer": answer, "respond_comment": comment, "respond_remember": remember},
        done="Escalation {id} answered; run {run} resumes.",
    )


@router.post("/reviews/{escalation_id}/edit")
def edit(
    request: Request,
    escalation_id: EscalationId,
    plan: Text = "",
    arguments: Text = "",
    comment: Text = "",
) -> Response:
    """Edit the plan: the reviewer's steps replace every step that has not run yet; or, for a
    tool call waiting for approval, its arguments."""
    return _decide(
        request,
        escalation_id,
        "edit",
        lambda who: commands.edit(
            escalation_id,
            reviewer=who.name,
            plan=plan,
            arguments=arguments if arguments.strip() else None,
            comment=comment.strip() or None,
            token_id=who.token_id,
        ),
        typed={"plan": plan, "arguments": arguments, "edit_comment": comment},
        done="Escalation {id} decided with your edit; run {run} resumes.",
    )


@router.post("/reviews/{escalation_id}/claim")
def claim(request: Request, escalation_id: EscalationId) -> Response:
    """Claim the escalation: only you can decide it until you release it."""
    principal = reviewer(request)
    try:
        commands.claim(escalation_id, reviewer=principal.name, token_id=principal.token_id)
    except IllegalTransition as exc:
        problem = {"action": "claim", "message": str(exc), "kind": "conflict"}
        return _review(request, principal, escalation_id, status_code=409, problem=problem)
    flash(request, f"You claimed escalation {escalation_id}.")
    return RedirectResponse(f"{base_path(request)}/reviews/{escalation_id}", SEE_OTHER)


@router.post("/reviews/{escalation_id}/release")
def release(request: Request, escalation_id: EscalationId) -> Response:
    """Give a claim back to the queue."""
    principal = reviewer(request)
    try:
        commands.release(escalation_id, reviewer=principal.name, token_id=principal.token_id)
    except (IllegalTransition, ClaimedByAnother) as exc:
        problem = {"action": "claim", "message": str(exc), "kind": "conflict"}
        return _review(request, principal, escalation_id, status_code=409, problem=problem)
    flash(request, f"Escalation {escalation_id} is back in the open queue.")
    return RedirectResponse(f"{base_path(request)}/reviews/{escalation_id}", SEE_OTHER)
