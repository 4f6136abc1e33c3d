"""`/api/v1/schedules`: put a goal on a schedule, list and read schedules, pause, resume and remove
one (`models.front.schedules`; the rules are `models.schedules`').

Tokens are scoped as for runs (`api.runs`): a submitter makes and sees its own user's schedules
only (another user's is a 404, as if it did not exist); a reviewer reads every schedule (they read
every run) and changes none; an admin does everything, naming the user of a new schedule. A
schedule with an explicit plan is for the roles in `AGENTQ_PLAN_SUBMIT_ROLES`, as a submit is.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, status

from api.auth import AnyPrincipal, Principal, Submitter
from api.responses import ScheduleOut
from api.runs import run_request
from api.schedule_responses import schedule_out
from api.schemas import PG_INT_MAX, ScheduleCreate
from models.engine.runs import USER_ID_MAX_CHARS
from models.front import schedules as front
from models.patterns import NO_NUL_PATTERN

router = APIRouter(prefix="/schedules", tags=["schedules"])
ScheduleId = Annotated[int, Path(ge=1, le=PG_INT_MAX, description="Schedule id.")]


def owner_of(principal: Principal) -> str | None:
    """Whose schedules `principal` may see: a submitter's own user's; every user's (None) for
    reviewers and admins."""
    return (principal.user_id or "") if principal.role == "submitter" else None


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=ScheduleOut,
    summary="Put a goal on a schedule",
)
def create(body: ScheduleCreate, principal: Submitter) -> ScheduleOut:
    """Make a schedule that submits the run `body` describes (as `POST /api/v1/runs` takes it)
    at each due time of `cron` in `timezone`, or every `every_s` seconds from now. At each due
    time one run is submitted, however many schedulers run; the user's quotas apply then as to
    any submit (a refused due time is recorded with the refusal, not retried). `overlap`
    `skip` submits nothing while the schedule's last run is active. After a wait with no
    scheduler, at most `catch_up` missed due times fire (the latest), the rest are recorded as
    missed.

    The run request is checked as a submit checks it, and the timing (400 naming the field:
    a cron expression croniter cannot read, an unknown time zone, an interval under
    AGENTQ_SCHEDULE_MIN_INTERVAL_S); 409 when the user has a schedule of that name, or has
    AGENTQ_USER_MAX_SCHEDULES. Submitter (own user) or admin (naming `user`)."""
    shown = front.create(
        run_request(body, principal),
        name=body.name,
        cron=body.cron,
        timezone=body.timezone,
        every_s=body.every_s,
        overlap=body.overlap,
        catch_up=body.catch_up,
    )
    return schedule_out(shown)


@router.get("", response_model=list[ScheduleOut], summary="List schedules")
def listing(
    principal: AnyPrincipal,
    user: Annotated[
        str | None, Query(min_length=1, max_length=USER_ID_MAX_CHARS, pattern=NO_NUL_PATTERN)
    ] = None,
) -> list[ScheduleOut]:
    """The schedules by user and name, each with its next due time and its newest 5 fires (what
    became of each due time, and its run's status now); `user` filters. A submitter token
    lists its own user's only (another `user` gives an empty list)."""
    return [schedule_out(s) for s in front.listed(owner=owner_of(principal), user_id=user)]


@router.get("/{schedule_id}", response_model=ScheduleOut, summary="One schedule")
def show(schedule_id: ScheduleId, principal: AnyPrincipal) -> ScheduleOut:
    """The schedule with its newest 20 fires. 404 when it does not exist or (for a submitter)
    is another user's."""
    return schedule_out(front.show(schedule_id, owner=owner_of(principal)))


@router.post("/{schedule_id}/pause", response_model=ScheduleOut, summary="Pause a schedule")
def pause(schedule_id: ScheduleId, principal: Submitter) -> ScheduleOut:
    """No due time fires until it is resumed. 409 when it is paused already (nothing changed).
    Submitter (own schedules) or admin."""
    return schedule_out(front.pause(schedule_id, owner=owner_of(principal)))


@router.post("/{schedule_id}/resume", response_model=ScheduleOut, summary="Resume a schedule")
def resume(schedule_id: ScheduleId, principal: Submitter) -> ScheduleOut:
    """It fires again from its first due time after now: the due times of the pause are not
    owed (no burst). 409 when it is not paused. Submitter (own schedules) or admin."""
    return schedule_out(front.resume(schedule_id, owner=owner_of(principal)))


@router.delete("/{schedule_id}", response_model=ScheduleOut, summary="Remove a schedule")
def remove(schedule_id: ScheduleId, principal: Submitter) -> ScheduleOut:
    """Delete the schedule and its fires (the runs it submitted stay); the schedule as it was.
    Submitter (own schedules) or admin."""
    return schedule_out(front.remove(schedule_id, owner=owner_of(principal)))
