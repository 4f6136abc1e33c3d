"""Drop `ix_step_attempts_step_id`, which the unique `(step_id, attempt)` index already serves.

Revision ID: 0041
Revises: 0040

Every lookup of a step's attempts by `step_id` can use the unique index's leading column, so
the second index only cost a write per claim (issue 29: each chained step inserts an attempt).
"""

from __future__ import annotations

from alembic import op

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_step_attempts_step_id", table_name="step_attempts")


def downgrade() -> None:
    op.create_index("ix_step_attempts_step_id", "step_attempts", ["step_id"])
