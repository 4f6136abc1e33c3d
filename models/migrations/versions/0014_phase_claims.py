"""A run's phase claim: `phase_attempt`, `phase_lease_expires_at`, `phase_worker` (issue 11).

Revision ID: 0014
Revises: 0013

A plan, replan, synthesis or fact-extraction task claims its run's phase before it calls the
model (`models.engine.phases`), so a second delivery of the task does nothing. A run under way when
the database was upgraded has no claim: its phase task, if one is out, claims it as it starts.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column("phase_attempt", sa.Integer(), nullable=False, server_default=sa.text("0")),
    )
    op.add_column(
        "runs", sa.Column("phase_lease_expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("runs", sa.Column("phase_worker", sa.String(length=200), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "phase_worker")
    op.drop_column("runs", "phase_lease_expires_at")
    op.drop_column("runs", "phase_attempt")
