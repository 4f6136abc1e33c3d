"""Goals on a schedule (issue 32, item 2).

Revision ID: 0038
Revises: 0037

A schedule submits a goal as its user at each due time of a cron expression (in an IANA time
zone) or an interval (`models.schedules`); each due time is one `schedule_fires` row, unique per
schedule and due time: its insert is the claim that makes a due time fire at most once, however
many schedulers run.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None


def _when(name: str, comment: str, *, nullable: bool = False) -> sa.Column[Any]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable, comment=comment)


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), primary_key=True, comment="The schedule's id."),
        sa.Column(
            "user_id",
            sa.String(length=200),
            nullable=False,
            comment="The user its runs are submitted as.",
        ),
        sa.Column(
            "name", sa.String(length=64), nullable=False, comment="Its name, unique per user."
        ),
        sa.Column("goal", sa.String(), nullable=False, comment="The goal each run is given."),
        sa.Column(
            "request",
            JSONB(),
            nullable=False,
            comment="The rest of the run request: facts, budgets, plan, success criteria, "
            "replan check, pin_from_goal, approvals (models.schedules.requests).",
        ),
        sa.Column(
            "cron",
            sa.String(length=200),
            nullable=True,
            comment="A five-field cron expression or alias, read in timezone; NULL: every_s.",
        ),
        sa.Column(
            "timezone",
            sa.String(length=64),
            nullable=False,
            comment="The IANA time zone cron is read in.",
        ),
        sa.Column(
            "every_s",
            sa.Integer(),
            nullable=True,
            comment="The interval, s, from created_at; NULL: cron.",
        ),
        sa.Column(
            "overlap",
            sa.String(length=10),
            nullable=False,
            comment="skip (no run while its last run is active) or allow.",
        ),
        sa.Column(
            "catch_up",
            sa.Integer(),
            nullable=False,
            comment="Due times missed while no scheduler ran that fire at most (the latest).",
        ),
        _when("next_due_at", "The first due time not yet fired."),
        _when("paused_at", "When it was paused; NULL: active.", nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When it was made (an interval's anchor).",
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When it was last paused, resumed or advanced.",
        ),
        sa.UniqueConstraint("user_id", "name", name="schedules_user_name"),
        sa.CheckConstraint("(cron IS NULL) <> (every_s IS NULL)", name="schedules_one_timing"),
        sa.CheckConstraint("overlap IN ('skip', 'allow')", name="schedules_overlap"),
        comment="Goals on a schedule (models.schedules).",
    )
    op.create_index("ix_schedules_user_id", "schedules", ["user_id"])
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_due_at"],
        postgresql_where=sa.text("paused_at IS NULL"),
    )
    op.create_table(
        "schedule_fires",
        sa.Column("id", sa.Integer(), primary_key=True, comment="The fire's id."),
        sa.Column(
            "schedule_id",
            sa.Integer(),
            sa.ForeignKey("schedules.id", ondelete="CASCADE"),
            nullable=False,
            comment="The schedule (schedules.id).",
        ),
        _when("due_at", "The due time; unique per schedule (the claim)."),
        sa.Column(
            "outcome",
            sa.String(length=20),
            nullable=False,
            comment="submitted, skipped (overlap), refused (quota, limit, bad input) or missed.",
        ),
        sa.Column(
            "run_id",
            sa.Integer(),
            nullable=True,
            comment="The run submitted (runs.id, by id alone: a purged run leaves it); NULL: none.",
        ),
        sa.Column(
            "detail",
            sa.String(length=2000),
            nullable=False,
            comment="Why no run: the active run, the refusal's error, the due times missed.",
        ),
        sa.Column(
            "due_times",
            sa.Integer(),
            nullable=False,
            comment="How many due times the row stands for (more than 1: missed ones).",
        ),
        sa.Column(
            "fired_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When the scheduler recorded it.",
        ),
        sa.UniqueConstraint("schedule_id", "due_at", name="schedule_fires_due"),
        comment="Each due time of a schedule and what became of it (models.schedules.fires).",
    )
    op.create_index("ix_schedule_fires_run_id", "schedule_fires", ["run_id"])


def downgrade() -> None:
    op.drop_table("schedule_fires")
    op.drop_table("schedules")
