"""What a run must achieve: `runs.success_criteria` (issue 12, item 1).

Revision ID: 0019
Revises: 0018

A run's success criteria, given at submit or written by the planner with plan version 1, are
judged once its answer is written (`models.engine.goal_checks`, `worker.phases.goal_check`); a goal
not met is replanned, then escalated `goal_not_met`. Runs submitted before this revision have none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column(
            "success_criteria", JSONB(), nullable=False, server_default=sa.text("'[]'::jsonb")
        ),
    )


def downgrade() -> None:
    op.drop_column("runs", "success_criteria")
