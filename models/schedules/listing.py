"""What the front ends show of schedules: each with its next due time and its last fires, each
fire with its outcome and, for a submitted one, its run's status now (`agentq schedule list` and
`show`, `GET /api/v1/schedules[/{id}]`, the console's `/ui/schedules`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlmodel import Session, col, select

from models import sql
from models.schedules.schedules import Schedule

FIRES_LISTED: Final = 5  # last fires per schedule in a list
FIRES_SHOWN: Final = 20  # ... and when one schedule is shown
SCHEDULES_LISTED_MAX: Final = 1000

# last_fires: the newest :per_schedule fires of each schedule of :ids, newest first, with the
# status of each one's run now (NULL: none, or purged since).
LAST_FIRES: Final = """
SELECT f.schedule_id, f.due_at, f.outcome, f.run_id, r.status AS run_status, f.detail,
       f.due_times, f.fired_at
FROM (SELECT *, row_number() OVER (PARTITION BY schedule_id ORDER BY due_at DESC) AS n
      FROM schedule_fires WHERE schedule_id = ANY(:ids)) f
LEFT JOIN runs r ON r.id = f.run_id
WHERE f.n <= :per_schedule
ORDER BY f.schedule_id, f.due_at DESC"""


@dataclass(frozen=True)
class FireShown:
    """One fire: its due time, outcome (`submitted`, `skipped`, `refused`, `missed`), run and
    that run's status now, why (`detail`), how many due times it stands for, when it was
    recorded."""

    due_at: datetime
    outcome: str
    run_id: int | None
    run_status: str | None
    detail: str
    due_times: int
    fired_at: datetime


@dataclass(frozen=True)
class ScheduleShown:
    """A schedule and its newest fires, newest first."""

    schedule: Schedule
    fires: list[FireShown]

    @property
    def next_due_at(self) -> datetime | None:
        """When it fires next; None while it is paused."""
        return None if self.schedule.paused_at is not None else self.schedule.next_due_at


def listed(
    session: Session,
    *,
    owner: str | None = None,
    user_id: str | None = None,
    fires: int = FIRES_LISTED,
) -> list[ScheduleShown]:
    """The schedules of `owner` (None: every user's) and `user_id` (None: any), by user and name,
    at most `SCHEDULES_LISTED_MAX`, each with its newest `fires` fires."""
    query = select(Schedule).order_by(col(Schedule.user_id), col(Schedule.name))
    for user in (owner, user_id):
        if user is not None:
            query = query.where(col(Schedule.user_id) == user)
    schedules = list(session.exec(query.limit(SCHEDULES_LISTED_MAX)).all())
    return with_fires(session, schedules, fires=fires)


def with_fires(
    session: Session, schedules: list[Schedule], *, fires: int = FIRES_SHOWN
) -> list[ScheduleShown]:
    """Each of `schedules` with its newest `fires` fires (`LAST_FIRES`, one query)."""
    ids = [s.id for s in schedules]
    found: dict[int, list[FireShown]] = {}
    if ids:
        params = {"ids": ids, "per_schedule": fires}
        for row in sql.execute(session, LAST_FIRES, params):
            found.setdefault(row.schedule_id, []).append(FireShown(*row[1:]))
    return [ScheduleShown(s, found.get(s.id or 0, [])) for s in schedules]


def timing_text(schedule: Schedule) -> str:
    """When `schedule` is due, in words: `0 9 * * 1-5 (Europe/Berlin)` or `every 3600 s`."""
    if schedule.every_s is not None:
        return f"every {schedule.every_s} s"
    return f"{schedule.cron} ({schedule.timezone})"


def fire_text(fire: FireShown) -> str:
    """What became of a due time, in words: `run 12 (succeeded)`, `skipped: run 7 of this
    schedule is running`, `refused: UserQuotaExceeded: ...`, `missed: 9 due times ...`."""
    if fire.outcome == "submitted":
        return f"run {fire.run_id} ({fire.run_status or 'purged'})"
    return f"{fire.outcome}: {fire.detail}"
