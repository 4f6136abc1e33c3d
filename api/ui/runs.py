"""The runs pages: the list with live progress, and one run in full.

A submitter sees only the runs of the user its token acts for; another user's run is "not
found", exactly like one that does not exist. Pages of live runs poll `.../version.json` (the
newest event id of what they show) and reload when it changes.
"""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session, col, select

from api.auth import Principal
from api.runs import RunId
from api.ui import run_details
from api.ui.security import REVIEW_ROLES, current_principal
from api.ui.templating import base_path, render
from models.db import session_scope
from models.errors import NotFound
from models.plans import current_steps
from models.runs import pinned_facts
from models.states import RUN_STATUSES, RUN_TERMINAL
from models.tables import Run

RUNS_PAGE_SIZE: Final = 50
router = APIRouter()


def _visible(principal: Principal) -> Any:
    """Runs `principal` may see: a submitter's user's own, everyone's for reviewers and admins."""
    stmt = select(Run.id)
    if principal.role not in REVIEW_ROLES:
        stmt = stmt.where(Run.user_id == (principal.user_id or ""))
    return stmt


def visible_run(session: Session, principal: Principal, run_id: int) -> Run:
    """The run `run_id` if `principal` may see it; raises `NotFound` otherwise."""
    run = session.get(Run, run_id)
    if run is None or (principal.role not in REVIEW_ROLES and run.user_id != principal.user_id):
        raise NotFound(f"run {run_id} does not exist")
    return run


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, status: str | None = None) -> HTMLResponse:
    """The newest runs, with each one's progress through its current plan."""
    principal = current_principal(request)
    shown = status if status in RUN_STATUSES else None
    with session_scope() as session:
        stmt = select(Run).where(col(Run.id).in_(_visible(principal)))
        if shown:
            stmt = stmt.where(Run.status == shown)
        runs = list(session.exec(stmt.order_by(col(Run.id).desc()).limit(RUNS_PAGE_SIZE)))
        progress = run_details.progress_of(session, runs)
        version = run_details.last_event_id(session, run_ids=_visible(principal))
    return render(
        request,
        "runs.html",
        principal=principal,
        title="Runs",
        runs=runs,
        progress_by_run=progress,
        status_filter=shown,
        statuses=RUN_STATUSES,
        poll_url=f"{base_path(request)}/runs/version.json",
        poll_version=version,
    )


@router.get("/runs/version.json")
def runs_version(request: Request) -> dict[str, int]:
    """The newest event id among the runs the list may show."""
    principal = current_principal(request)
    with session_scope() as session:
        return {"version": run_details.last_event_id(session, run_ids=_visible(principal))}


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: RunId) -> HTMLResponse:
    """One run: spend, pinned facts, plan versions side by side, steps, escalations, timeline."""
    principal = current_principal(request)
    with session_scope() as session:
        run = visible_run(session, principal, run_id)
        context: dict[str, Any] = {
            "run": run,
            "facts": pinned_facts(session, run_id),
            "columns": run_details.plan_columns(session, run),
            "steps": current_steps(session, run),
            "moments": run_details.timeline(session, run_id),
            "escalations": run_details.run_escalations(session, run_id),
            "meters": run_details.spend(run),
            "poll_version": run_details.last_event_id(session, run_ids=[run_id]),
        }
    live = run.status not in RUN_TERMINAL
    return render(
        request,
        "run.html",
        principal=principal,
        title=f"Run {run_id}",
        poll_url=f"{base_path(request)}/runs/{run_id}/version.json" if live else None,
        **context,
    )


@router.get("/runs/{run_id}/version.json")
def run_version(request: Request, run_id: RunId) -> dict[str, int]:
    """The run's newest event id."""
    principal = current_principal(request)
    with session_scope() as session:
        visible_run(session, principal, run_id)
        return {"version": run_details.last_event_id(session, run_ids=[run_id])}
