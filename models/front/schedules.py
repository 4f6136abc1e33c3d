"""The schedule commands behind `agentq schedule ...`, `/api/v1/schedules` and the console's
`/ui/schedules` (`models.schedules` has the rules): create, list, show, pause, resume, remove.

Each opens one transaction and reads the process's settings itself. `owner` is the only user
whose schedules the caller may see or change (a submitter token's user; None: any, for admins,
reviewers' reads and the CLI); another user's schedule is `NotFound`, as a missing one is.
"""

from __future__ import annotations

from sqlmodel import Session

from models.db import session_scope
from models.engine.submissions import RunRequest
from models.schedules import due_times, listing, requests, schedules
from models.schedules.listing import ScheduleShown
from models.schedules.schedules import Schedule
from models.settings import get_settings
from models.tables import utcnow


def create(
    request: RunRequest,
    *,
    name: str,
    cron: str | None = None,
    timezone: str | None = None,
    every_s: int | None = None,
    overlap: str = "skip",
    catch_up: int | None = None,
) -> ScheduleShown:
    """Make schedule `name` of `request.user_id`, which submits `request` at each due time of
    `cron` (read in `timezone`, default UTC) or every `every_s` seconds from now; `overlap`
    `skip` or `allow`; `catch_up` (default `AGENTQ_SCHEDULE_CATCH_UP`) due times fire at most
    after a wait. The request is checked as a submit would check it
    (`models.schedules.requests.check`). Raises `InvalidInput` naming the field, or `Conflict`
    (the name is taken, or `AGENTQ_USER_MAX_SCHEDULES` reached); nothing is written then."""
    settings = get_settings()
    catch_up = settings.schedule_catch_up if catch_up is None else catch_up
    schedules.check_shape(name=name, overlap=overlap, catch_up=catch_up)
    now = utcnow()
    spec = due_times.timing(
        cron=cron,
        timezone=timezone,
        every_s=every_s,
        anchor=now,
        min_interval_s=settings.schedule_min_interval_s,
    )
    row = Schedule(
        user_id=request.user_id,
        name=name,
        goal=request.goal,
        request=requests.stored(request),
        cron=spec.cron,
        timezone=spec.timezone,
        every_s=spec.every_s,
        overlap=overlap,
        catch_up=catch_up,
        next_due_at=spec.following(now),
        created_at=now,
        updated_at=now,
    )
    with session_scope() as session:
        requests.check(session, request, settings=settings)
        schedules.insert(session, row, settings=settings)
        return _shown(session, row)


def listed(*, owner: str | None = None, user_id: str | None = None) -> list[ScheduleShown]:
    """The schedules `owner` may see (of `user_id` only, if given), by user and name, each with
    its next due time and last fires (`models.schedules.listing.listed`)."""
    with session_scope() as session:
        return listing.listed(session, owner=owner, user_id=user_id)


def show(schedule_id: int, *, owner: str | None = None) -> ScheduleShown:
    """Schedule `schedule_id` with its newest fires; raises `NotFound`."""
    with session_scope() as session:
        return _shown(session, schedules.get(session, schedule_id, owner=owner))


def pause(schedule_id: int, *, owner: str | None = None) -> ScheduleShown:
    """Pause the schedule: no due time fires until it is resumed. Raises `NotFound`, or
    `Conflict` when it is paused already (nothing changed)."""
    with session_scope() as session:
        found = schedules.get(session, schedule_id, owner=owner)
        return _shown(session, schedules.pause(session, found))


def resume(schedule_id: int, *, owner: str | None = None) -> ScheduleShown:
    """Resume the paused schedule from its first due time after now (the due times it was
    paused for are not owed). Raises `NotFound`, or `Conflict` when it is not paused."""
    with session_scope() as session:
        found = schedules.get(session, schedule_id, owner=owner)
        return _shown(session, schedules.resume(session, found))


def remove(schedule_id: int, *, owner: str | None = None) -> ScheduleShown:
    """Delete the schedule and its fires (its runs stay); what it was. Raises `NotFound`."""
    with session_scope() as session:
        found = schedules.get(session, schedule_id, owner=owner)
        shown = _shown(session, found)
        schedules.remove(session, found)
        return shown


def _shown(session: Session, schedule: Schedule) -> ScheduleShown:
    return listing.with_fires(session, [schedule])[0]
