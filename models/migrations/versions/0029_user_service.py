"""The worker time each user's tasks have had: `user_service` (issue 27, item 2).

Revision ID: 0029
Revises: 0028

Fair dispatch serves the waiting user whose tasks have had the least worker time
(`models.engine.fair_queue`): each task's seconds are added to its user's `service_s` when it ends,
and a user who submits after a pause is lifted to the least value among the users still active, so
idle time banks no credit. A database upgraded to this revision starts every user at 0.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "user_service",
        sa.Column(
            "user_id",
            sqlmodel.sql.sqltypes.AutoString(length=200),
            nullable=False,
            comment="The user (runs.user_id).",
        ),
        sa.Column(
            "service_s",
            sa.Float(),
            nullable=False,
            comment="Worker seconds the user's tasks have had, lifted on return "
            "(models/engine/fair_queue.py).",
        ),
        sa.PrimaryKeyConstraint("user_id"),
        comment="Worker time per user: fair dispatch serves the least-served waiting user first.",
    )


def downgrade() -> None:
    op.drop_table("user_service")
