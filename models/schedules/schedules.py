"""The schedule rows and their guarded writes: create, pause, resume, remove.

A `Schedule` is a user's run request (`goal` and `request`, `models.schedules.requests`) and its
timing (`cron` in `timezone`, or `every_s`), with the next due time as a column (`next_due_at`:
time lives in rows, DESIGN.md invariant 10). A `ScheduleFire` is one due time of one schedule and
what became of it; `(schedule_id, due_at)` is unique, so a due time is fired at most once however
many schedulers look (`models.schedules.fires`). Pausing and resuming are guarded `UPDATE ...
WHERE paused_at IS [NOT] NULL RETURNING`: one that finds the schedule in the other state changes
nothing and says so (`Conflict`).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import JSONB
from sqlmodel import Field, Session, SQLModel, col, func, select

from models import sql
from models.errors import Conflict, InvalidInput, NotFound
from models.patterns import SCHEDULE_NAME_PATTERN, WORDS
from models.schedules import due_times
from models.settings import Settings
from models.tables import created_field, timestamp_field, utcnow

Overlap = Literal["skip", "allow"]
OVERLAPS: Final = ("skip", "allow")  # skip: no new run while the last one is active
OUTCOMES: Final = ("submitted", "skipped", "refused", "missed")  # a ScheduleFire's outcome
CATCH_UP_MAX: Final = 100  # as AGENTQ_SCHEDULE_CATCH_UP's bound
DETAIL_MAX_CHARS: Final = 2000


class Schedule(SQLModel, table=True):
    """A goal submitted as `user_id` at each due time: of `cron` read in `timezone`, or every
    `every_s` seconds after `created_at`. `request` holds the rest of the run request
    (`models.schedules.requests`). `overlap`: `skip` (no run while this schedule's last run is
    active) or `allow`. `catch_up`: how many due times missed while no scheduler ran fire
    (the latest). `next_due_at`: the first due time not yet fired (UTC); `paused_at`: when it
    was paused (NULL: active)."""

    __tablename__ = "schedules"
    __table_args__ = (
        sa.UniqueConstraint("user_id", "name", name="schedules_user_name"),
        sa.CheckConstraint("(cron IS NULL) <> (every_s IS NULL)", name="schedules_one_timing"),
        sa.CheckConstraint("overlap IN ('skip', 'allow')", name="schedules_overlap"),
        # The fire pass's scan (`models.schedules.fires.CLAIM_DUE_SCHEDULE`).
        sa.Index("ix_schedules_due", "next_due_at", postgresql_where=sa.text("paused_at IS NULL")),
    )
    id: int | None = Field(default=None, primary_key=True)
    user_id: str = Field(index=True, max_length=200)
    name: str = Field(max_length=64)
    goal: str
    request: dict[str, Any] = Field(default_factory=dict, sa_type=JSONB, nullable=False)
    cron: str | None = Field(default=None, max_length=due_times.CRON_MAX_CHARS)
    timezone: str = Field(default="UTC", max_length=due_times.TIMEZONE_MAX_CHARS)
    every_s: int | None = None
    overlap: str = Field(default="skip", max_length=10)
    catch_up: int = 1
    next_due_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)
    paused_at: datetime | None = timestamp_field()
    created_at: datetime = created_field()
    updated_at: datetime = created_field()

    def timing(self) -> due_times.Timing:
        """When it is due (`models.schedules.due_times.Timing`), interval anchored at creation."""
        return due_times.Timing(
            cron=self.cron, timezone=self.timezone, every_s=self.every_s, anchor=self.created_at
        )


class ScheduleFire(SQLModel, table=True):
    """One due time of a schedule and what became of it (`outcome`): `submitted` (run
    `run_id`), `skipped` (overlap `skip`: the schedule's last run was still active, `detail`
    names it), `refused` (the submit was refused: a quota, a limit, bad input; `detail` is the
    error), or `missed` (passed while no scheduler ran, beyond the catch-up bound: `due_times`
    due times from `due_at` on, `detail` says until when). `run_id` names the run by id alone, as
    the webhook outbox does: a run purged (`models.operations.retention`) or erased since leaves
    the row as it was, its id naming no run."""

    __tablename__ = "schedule_fires"
    __table_args__ = (sa.UniqueConstraint("schedule_id", "due_at", name="schedule_fires_due"),)
    id: int | None = Field(default=None, primary_key=True)
    schedule_id: int = Field(foreign_key="schedules.id", ondelete="CASCADE")
    due_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)
    outcome: str = Field(max_length=20)
    run_id: int | None = Field(default=None, index=True)  # by id alone: see the class
    detail: str = Field(default="", max_length=DETAIL_MAX_CHARS)
    due_times: int = 1
    fired_at: datetime = created_field()


def check_shape(*, name: str, overlap: str, catch_up: int) -> None:
    """Raise `InvalidInput` naming the field unless `name` matches `SCHEDULE_NAME_PATTERN`,
    `overlap` is one of `OVERLAPS` and `catch_up` is 1 to `CATCH_UP_MAX`."""
    if not re.fullmatch(SCHEDULE_NAME_PATTERN, name):
        raise InvalidInput(f"name: {name[:80]!r} {WORDS[SCHEDULE_NAME_PATTERN]}")
    if overlap not in OVERLAPS:
        raise InvalidInput(f"overlap: one of {', '.join(OVERLAPS)} (got {overlap[:40]!r})")
    if not 1 <= catch_up <= CATCH_UP_MAX:
        raise InvalidInput(f"catch_up: 1 to {CATCH_UP_MAX} due times (got {catch_up})")


def insert(session: Session, schedule: Schedule, *, settings: Settings) -> Schedule:
    """Insert `schedule` (checked by the caller) in the caller's transaction. Raises `Conflict`
    when its user has a schedule of that name, or has `AGENTQ_USER_MAX_SCHEDULES` already (the
    count is taken under the user's advisory lock, so two creates cannot both pass it)."""
    sql.execute(session, USER_LOCK, {"key": f"schedules:{schedule.user_id}"})
    mine = select(func.count()).where(col(Schedule.user_id) == schedule.user_id)
    count = session.exec(mine).one()
    most = settings.user_max_schedules
    if most and count >= most:
        raise Conflict(
            f"AGENTQ_USER_MAX_SCHEDULES: user {schedule.user_id!r} has {count} schedules, the "
            f"most allowed ({most}); remove one first"
        )
    taken = select(Schedule.id).where(
        col(Schedule.user_id) == schedule.user_id, col(Schedule.name) == schedule.name
    )
    if session.exec(taken).first() is not None:
        raise Conflict(
            f"name: user {schedule.user_id!r} has a schedule named {schedule.name!r} already"
        )
    session.add(schedule)
    session.flush()
    return schedule


# user_lock: one user's schedule creates take turns until the transaction ends.
USER_LOCK: Final = "SELECT pg_advisory_xact_lock(hashtextextended(:key, 0))"


def get(session: Session, schedule_id: int, *, owner: str | None = None) -> Schedule:
    """Schedule `schedule_id`; `owner`: the only user whose schedules the caller may see (None:
    any). Raises `NotFound` alike for a missing schedule and another user's."""
    found = session.get(Schedule, schedule_id)
    if found is None or (owner is not None and found.user_id != owner):
        raise NotFound(f"schedule {schedule_id} does not exist")
    return found


# pause_schedule: an active schedule stops firing; its next due time is kept for the record.
PAUSE: Final = """
UPDATE schedules SET paused_at = :now, updated_at = :now
WHERE id = :id AND paused_at IS NULL RETURNING id"""
# resume_schedule: a paused schedule fires again from its first due time after now.
RESUME: Final = """
UPDATE schedules SET paused_at = NULL, next_due_at = :next_due, updated_at = :now
WHERE id = :id AND paused_at IS NOT NULL RETURNING id"""


def pause(session: Session, schedule: Schedule, *, now: datetime | None = None) -> Schedule:
    """Pause `schedule` (locked by the guard); raises `Conflict` when it is paused already."""
    now = now or utcnow()
    if sql.one(session, PAUSE, {"id": schedule.id, "now": now}) is None:
        raise Conflict(f"schedule {schedule.id} is paused already; nothing was changed")
    session.refresh(schedule)
    return schedule


def resume(session: Session, schedule: Schedule, *, now: datetime | None = None) -> Schedule:
    """Resume the paused `schedule` from its first due time after `now`: the due times that
    passed while it was paused are not owed (no burst, nothing recorded missed). Raises
    `Conflict` when it is not paused."""
    now = now or utcnow()
    next_due = schedule.timing().following(now)
    params = {"id": schedule.id, "now": now, "next_due": next_due}
    if sql.one(session, RESUME, params) is None:
        raise Conflict(f"schedule {schedule.id} is not paused; nothing was changed")
    session.refresh(schedule)
    return schedule


def remove(session: Session, schedule: Schedule) -> None:
    """Delete `schedule` with its fires; the runs it submitted stay."""
    session.delete(schedule)
    session.flush()


def remove_all(session: Session, *, user_id: str) -> int:
    """Delete every schedule of `user_id` with its fires (`agentq memory forget --runs`: they hold
    goals the user wrote, and would submit them again); how many there were."""
    deleted = sql.execute(session, REMOVE_ALL, {"user_id": user_id})
    return len(list(deleted))


REMOVE_ALL: Final = "DELETE FROM schedules WHERE user_id = :user_id RETURNING id"
