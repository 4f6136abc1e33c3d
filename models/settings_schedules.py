"""Settings of goals on a schedule (`models.schedules`, issue 32, item 2).

`models.settings.Settings` inherits these fields.
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings


class ScheduleSettings(BaseSettings):
    """Fields of `Settings` for schedules."""

    schedule_poll_interval_s: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="How often the scheduler's beat looks for due schedules, s: a due time fires "
        "at most this late (plus the time its pass takes).",
    )
    # systemd's `Persistent=true` timers run once on wake for any number of missed elapses
    # (systemd.timer(5)); 1 is that. Kubernetes CronJobs give up past 100 missed schedules.
    schedule_catch_up: int = Field(
        default=1,
        ge=1,
        le=100,
        description="A new schedule's catch-up bound: of the due times that passed while no "
        "scheduler ran, at most this many (the latest) fire; the earlier ones are recorded as "
        "missed.",
    )
    schedule_min_interval_s: int = Field(
        default=60,
        ge=1,
        description="The shortest interval (`every_s`) a schedule may have, s; a cron "
        "expression is at most once a minute.",
    )
    user_max_schedules: int = Field(
        default=100,
        ge=0,
        description="Schedules one user may have; 0: no limit.",
    )
