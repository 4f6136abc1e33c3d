"""The runs pages: the list with live progress, and one run in full.

A submitter sees only the runs of the user its token acts for; another user's run is "not
found", exactly like one that does not exist. A live run's page follows its event stream
(`api.ui.live`) and the list polls `.../version.json` (the newest event id of what it shows,
also the run page's fallback when its stream drops); on a change `static/console.js` fetches
the page again and swaps its live region in place. A submitter (or an admin)
cancels an active run from its page, as `POST /api/v1/runs/{id}/cancel` does. A run page shows
its newest events (older ones page back with `?events_before=`) and large results as previews;
`/runs/{id}/steps/{step_id}/result` shows one step's whole result, visible as the run is.
A run page lists the procedures its plans used (`procedures.recalled` events; the titles of the
user's own hidden from readers of no memory of theirs), and a run that succeeded after a
reviewer's edit offers whoever may read its user's memory (its submitter, an admin) to save its
final plan as the user's procedure (`POST .../save-procedure`, as `agentq procedure save
--from-run` does). A run page says where the run was forked from and which runs were forked from
it, marks its copied steps, and offers its submitter (or an admin) "Fork from here" on each step
a fork may start at (`POST .../fork`, as `agentq run fork` does).
"""

from __future__ import annotations

from typing import Annotated, Any, Final
from urllib.parse import urlencode

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from api.auth import Principal
from api.procedures import actor_of
from api.runs import EventsBefore, RunId, StepId, visible_run
from api.schemas import PG_INT_MAX
from api.ui import run_details
from api.ui.security import REVIEW_ROLES, Forbidden, current_principal
from api.ui.templating import base_path, flash, render
from models.db import session_scope
from models.engine import forks, lineage, previews
from models.engine.forks import ForkRequest
from models.engine.goal_reports import report_of
from models.engine.runs import pinned_facts
from models.errors import (
    Conflict,
    IllegalTransition,
    InvalidPlan,
    NotAllowed,
    NotFound,
    UserQuotaExceeded,
)
from models.front import commands, queries
from models.front.forks import fork as fork_run
from models.memory import procedure_admin
from models.memory.procedure_recall import used_by_run
from models.plans.step_data import json_bytes
from models.states import RUN_STATUSES, RUN_TERMINAL
from models.tables import Run

RUNS_PAGE_SIZE: Final = 50
CANCEL_ROLES: Final = frozenset({"submitter", "admin"})  # as `POST /api/v1/runs/{id}/cancel`
SEE_OTHER: Final = 303  # after a POST, the browser GETs the page it is sent to
Before = Annotated[int | None, Query(ge=1, le=PG_INT_MAX, description="Runs with ids below.")]
router = APIRouter()


def _owner(principal: Principal) -> str | None:
    """Whose runs `principal` may see: a submitter's user's own, everyone's (None) for
    reviewers and admins."""
    return None if principal.role in REVIEW_ROLES else (principal.user_id or "")


def _visible(principal: Principal) -> Any:
    """The ids of the runs `principal` may see, as a subquery."""
    return queries.run_ids_of(_owner(principal))


def may_cancel(principal: Principal, run: Run) -> bool:
    """Whether `principal` may cancel `run` now: an active run of its own user (a submitter), or
    any active run (an admin). Reviewers decide escalations instead, as in the API."""
    return run.status not in RUN_TERMINAL and principal.role in CANCEL_ROLES


@router.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, status: str | None = None, before: Before = None) -> Response:
    """The newest runs (or those with ids below `before`), `RUNS_PAGE_SIZE` a page, each with
    its progress through its current plan. An unknown `status` is a 400 naming the known ones."""
    principal = current_principal(request)
    status = status or None  # `?status=` is no filter
    if status is not None and status not in RUN_STATUSES:
        return _unknown_status(request, principal, status)
    with session_scope() as session:
        version = queries.last_event_id(session, run_ids=_visible(principal))  # first
        found = queries.newest_runs(
            session,
            limit=RUNS_PAGE_SIZE + 1,
            status=status,
            owner=_owner(principal),
            before=before,
        )
        runs = found[:RUNS_PAGE_SIZE]
        progress = run_details.progress_of(session, runs)
    older = runs[-1].id if len(found) > RUNS_PAGE_SIZE else None
    return render(
        request,
        "runs.html",
        principal=principal,
        title="Runs",
        runs=runs,
        progress_by_run=progress,
        status_filter=status,
        statuses=RUN_STATUSES,
        before=before,
        newest_url=_runs_url(request, status=status),
        older_url=_runs_url(request, status=status, before=older) if older else None,
        poll_url=f"{base_path(request)}/runs/version.json",
        poll_version=version,
    )


def _runs_url(request: Request, **query: Any) -> str:
    kept = {k: v for k, v in query.items() if v is not None}
    return f"{base_path(request)}/runs" + (f"?{urlencode(kept)}" if kept else "")


def _unknown_status(request: Request, principal: Principal, status: str) -> HTMLResponse:
    message = f"status: {status!r} is not a run status; use one of {', '.join(RUN_STATUSES)}."
    return render(
        request,
        "error.html",
        principal=principal,
        status_code=400,
        title="Unknown status",
        message=message,
    )


@router.get("/runs/version.json")
def runs_version(request: Request) -> dict[str, int]:
    """The newest event id among the runs the list may show."""
    principal = current_principal(request)
    with session_scope() as session:
        return {"version": queries.last_event_id(session, run_ids=_visible(principal))}


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: RunId, events_before: EventsBefore = None) -> HTMLResponse:
    """One run: spend, pinned facts, its goal check (`models.engine.goal_reports`), plan
    versions side by side, steps, escalations, and the newest page of its timeline (below
    `events_before`)."""
    principal = current_principal(request)
    with session_scope() as session:
        version = queries.last_event_id(session, run_ids=[run_id])  # first: see its doc
        run = visible_run(session, run_id, principal)
        columns = run_details.plan_columns(session, run)
        readable = principal.can_read_memory(run.user_id)
        page = run_details.timeline(session, run_id, memory_readable=readable, before=events_before)
        facts = pinned_facts(session, run_id)
        context: dict[str, Any] = {
            "run": run,
            "facts": facts,
            "goal": report_of(session, run, facts),
            "columns": columns,
            "steps": run_details.current_cells(columns),
            "moments": page.moments,
            "older_events": page.older,  # ?events_before= of the page before this one
            "paged_back": events_before is not None,
            "escalations": queries.run_escalations(session, run_id),
            "meters": run_details.spend(run),
            "poll_version": version,
            "may_cancel": may_cancel(principal, run),
            "procedures_used": used_by_run(session, run_id, memory_readable=readable),
            # saved as the user's own: offered to who may read (and delete) the user's memory
            "offer_procedure": readable and procedure_admin.offers_procedure(session, run),
            "kin": lineage.read(session, run_id),
            "forkable": forks.forkable(session, run) if principal.role in CANCEL_ROLES else set(),
        }
    live, base = run.status not in RUN_TERMINAL, f"{base_path(request)}/runs/{run_id}"
    return render(
        request,
        "run.html",
        principal=principal,
        title=f"Run {run_id}",
        poll_url=f"{base}/version.json" if live else None,
        stream_url=f"{base}/events/stream?after={version}" if live else None,  # since read
        **context,
    )


@router.get("/runs/{run_id}/steps/{step_id}/result", response_class=HTMLResponse)
def step_result_page(request: Request, run_id: RunId, step_id: StepId) -> HTMLResponse:
    """One step's whole result, as `GET /api/v1/runs/{run_id}/steps/{step_id}/result` returns
    it; "not found" as for the run, or when the run has no such step."""
    principal = current_principal(request)
    with session_scope() as session:
        run = visible_run(session, run_id, principal)
        step = previews.step_result(session, run_id, step_id)
        if step is None:
            raise NotFound(f"run {run_id} has no step {step_id}")
    return render(
        request,
        "step_result.html",
        principal=principal,
        title=f"Run {run_id}, step {step.name}",
        run=run,
        step=step,
        size=json_bytes(step.result) if step.result is not None else 0,
    )


@router.get("/runs/{run_id}/version.json")
def run_version(request: Request, run_id: RunId) -> dict[str, int]:
    """The run's newest event id."""
    principal = current_principal(request)
    with session_scope() as session:
        visible_run(session, run_id, principal)
        return {"version": queries.last_event_id(session, run_ids=[run_id])}


@router.post("/runs/{run_id}/cancel")
def cancel(request: Request, run_id: RunId) -> Response:
    """Cancel an active run (`models.front.commands.cancel`: under the run's lock, one transaction),
    then send what follows (`queue.follow_up`: its episode is written). A run that has ended
    already changes nothing and says so. Submitter (own runs) or admin."""
    principal = current_principal(request)

    def check(session: Session, _: int) -> None:
        visible_run(session, run_id, principal)
        if principal.role not in CANCEL_ROLES:
            raise Forbidden("Only the run's submitter or an admin can cancel a run.")

    try:
        done = commands.cancel(run_id, check=check)
    except IllegalTransition as exc:
        ended = exc.table == "runs" and exc.found in RUN_TERMINAL
        said = f"Run {run_id} has already ended ({exc.found}); nothing was changed."
        flash(request, said if ended else str(exc), "warn")
        return RedirectResponse(f"{base_path(request)}/runs/{run_id}", SEE_OTHER)
    message = f"Run {run_id} cancelled."
    if not done.notified:
        message += " The broker could not be reached, so the run's episode will not be written."
    flash(request, message)
    return RedirectResponse(f"{base_path(request)}/runs/{run_id}", SEE_OTHER)


@router.get("/runs/{run_id}/cancel", include_in_schema=False)
def cancel_page(request: Request, run_id: RunId) -> Response:
    """The cancel form's address opened (or reloaded) as a page: the run's page."""
    return RedirectResponse(f"{base_path(request)}/runs/{run_id}", SEE_OTHER)


@router.post("/runs/{run_id}/fork")
def fork(request: Request, run_id: RunId, from_step: Annotated[str, Form()]) -> Response:
    """Fork the run from step `from_step` (`models.front.forks.fork`, as `agentq run fork` and
    `POST /api/v1/runs/{id}/fork` do) with its plan and facts as they are, and open the new run;
    a fork refused (`Conflict`, `InvalidPlan`, a quota) is flashed on the run's page, nothing
    written. Submitter (own runs) or admin, as cancelling."""
    principal = current_principal(request)
    if principal.role not in CANCEL_ROLES:
        raise Forbidden("Only the run's submitter or an admin can fork a run.")
    request_ = ForkRequest(run_id, from_step)
    try:
        forked = fork_run(
            request_, user_id=principal.user_id if principal.role != "admin" else None
        )
    except (Conflict, InvalidPlan, UserQuotaExceeded) as exc:
        flash(request, str(exc), "warn")
        return RedirectResponse(f"{base_path(request)}/runs/{run_id}", SEE_OTHER)
    flash(request, f"Run {forked.run_id} forked from run {run_id} at step {from_step}.")
    return RedirectResponse(f"{base_path(request)}/runs/{forked.run_id}", SEE_OTHER)


@router.post("/runs/{run_id}/save-procedure")
def save_procedure(request: Request, run_id: RunId) -> Response:
    """Save the succeeded run's final plan as a procedure (`models.memory.procedure_admin.
    save_from_run`): the run's user's own; refused to a reviewer (flashed), who may not write
    that user's memory."""
    principal = current_principal(request)
    with session_scope() as session:
        visible_run(session, run_id, principal)
    try:
        saved = procedure_admin.save_from_run(actor_of(principal), run_id)
    except (Conflict, NotAllowed) as exc:
        flash(request, str(exc), "warn")
    else:
        flash(request, f"Saved as procedure {saved.id} ({saved.scope}): {saved.title}")
    return RedirectResponse(f"{base_path(request)}/runs/{run_id}", SEE_OTHER)
