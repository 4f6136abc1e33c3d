"""The response bodies of `/api/v1/schedules` (re-exported by `api.responses`), also what `agentq
schedule list --json` and `show --json` print; built from `models.schedules.listing`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

if TYPE_CHECKING:  # the client imports these models without the engine's
    from models.schedules.listing import ScheduleShown


class ScheduleFireOut(BaseModel):
    """One due time of a schedule and what became of it."""

    due_at: datetime
    outcome: str = Field(
        description="submitted (see `run_id`), skipped (overlap skip: the last run was still "
        "active), refused (a quota, a limit or bad input: see `detail`), or missed (passed while "
        "no scheduler ran, beyond the catch-up bound)."
    )
    run_id: int | None = Field(description="The run submitted; null: none.")
    run_status: str | None = Field(description="That run's status now; null: none, or purged.")
    detail: str = Field(
        description="Why no run: the active run, the refusal, the due times missed."
    )
    due_times: int = Field(description="How many due times this stands for (missed ones: more).")
    fired_at: datetime


class ScheduleOut(BaseModel):
    """A goal on a schedule: its run request, its timing, its state and its newest fires."""

    id: int
    user_id: str
    name: str
    goal: str
    request: dict[str, Any] = Field(
        description="The rest of each run's request: facts, budgets, plan, success_criteria, "
        "replan_check, pin_from_goal, approvals."
    )
    cron: str | None
    timezone: str
    every_s: int | None
    overlap: str
    catch_up: int
    paused: bool
    next_due_at: datetime | None = Field(description="When it fires next; null while paused.")
    created_at: datetime
    fires: list[ScheduleFireOut] = Field(description="The newest fires, newest first.")


def schedule_out(shown: ScheduleShown) -> ScheduleOut:
    """`shown` as the API answers it."""
    row = shown.schedule
    return ScheduleOut(
        id=row.id or 0,
        user_id=row.user_id,
        name=row.name,
        goal=row.goal,
        request=row.request,
        cron=row.cron,
        timezone=row.timezone,
        every_s=row.every_s,
        overlap=row.overlap,
        catch_up=row.catch_up,
        paused=row.paused_at is not None,
        next_due_at=shown.next_due_at,
        created_at=row.created_at,
        fires=[ScheduleFireOut.model_validate(f, from_attributes=True) for f in shown.fires],
    )
