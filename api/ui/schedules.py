"""The schedules page: `/ui/schedules`, goals on a schedule (issue 32, item 2).

Each schedule (`models.front.schedules.listed`, as `agentq schedule list` shows them) with its
goal, its timing, its overlap and catch-up, its next due time (or "paused"), and what became of
its last due times: each run with its status now (linked), or why there was none (skipped,
refused with the refusal's words, missed). Scoped as `GET /api/v1/schedules`: a submitter sees
its own user's schedules, reviewers and admins everyone's. A submitter (its own) or an admin
pauses and resumes a schedule from here (`POST .../pause`, `.../resume`, as the API does);
reviewers read only.
"""

from __future__ import annotations

from typing import Annotated, Final

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from api.auth import Principal
from api.schedules import owner_of
from api.schemas import PG_INT_MAX
from api.ui.security import Forbidden, current_principal
from api.ui.templating import base_path, flash, render
from models.errors import Conflict
from models.front import schedules as front
from models.schedules.listing import fire_text, timing_text

CHANGE_ROLES: Final = frozenset({"submitter", "admin"})  # as the API's pause and resume
SEE_OTHER: Final = 303  # after a POST, the browser GETs the page it is sent to
ScheduleId = Annotated[int, Path(ge=1, le=PG_INT_MAX)]
router = APIRouter()


@router.get("/schedules", response_class=HTMLResponse)
def schedules_page(request: Request) -> HTMLResponse:
    """The schedules the signed-in token may see, by user and name, each with its last 5 fires."""
    principal = current_principal(request)
    return render(
        request,
        "schedules.html",
        principal=principal,
        title="Schedules",
        nav="schedules",
        schedules=front.listed(owner=owner_of(principal)),
        may_change=principal.role in CHANGE_ROLES,
        timing_text=timing_text,
        fire_text=fire_text,
    )


@router.post("/schedules/{schedule_id}/pause")
def pause(request: Request, schedule_id: ScheduleId) -> Response:
    """Pause the schedule (`models.front.schedules.pause`); one paused already changes nothing
    and says so."""
    return _change(request, schedule_id, "pause")


@router.post("/schedules/{schedule_id}/resume")
def resume(request: Request, schedule_id: ScheduleId) -> Response:
    """Resume the schedule from its next due time after now; one not paused changes nothing
    and says so."""
    return _change(request, schedule_id, "resume")


def _change(request: Request, schedule_id: int, action: str) -> Response:
    principal: Principal = current_principal(request)
    if principal.role not in CHANGE_ROLES:
        raise Forbidden("Only the schedule's submitter or an admin can pause or resume it.")
    change = front.pause if action == "pause" else front.resume
    try:
        row = change(schedule_id, owner=owner_of(principal)).schedule
    except Conflict as exc:
        flash(request, str(exc), "warn")
    else:
        said = "paused" if action == "pause" else "resumed; it fires from its next due time"
        flash(request, f"Schedule {row.name} {said}.")
    return RedirectResponse(f"{base_path(request)}/schedules", SEE_OTHER)
