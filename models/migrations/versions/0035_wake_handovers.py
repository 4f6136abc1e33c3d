"""A taken step's message handed over to a newly queued step: `steps.wake_via` (issue 29).

Revision ID: 0035
Revises: 0034

A worker that takes a queued step in fair order before the step's message comes (a worker that
ended a step, or a wake-up taking the fair-next item for another message) queues the next step of
its own run without a message of its own: it points to the taken step, whose message, when it
comes, wakes a worker for it (`models.engine.handovers`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None

COMMENT = (
    "The step whose broker message wakes a worker for this one, queued without a message of its "
    "own (models/engine/handovers.py); NULL: its own message."
)


def upgrade() -> None:
    op.add_column("steps", sa.Column("wake_via", sa.Integer(), nullable=True, comment=COMMENT))
    op.create_index(
        "ix_steps_wake_via",
        "steps",
        ["wake_via"],
        postgresql_where=sa.text("wake_via IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_steps_wake_via", table_name="steps")
    op.drop_column("steps", "wake_via")
