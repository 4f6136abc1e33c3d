"""Per-user quotas and fair dispatch: the indexes their queries use (issue 9, finding 3).

Revision ID: 0011
Revises: 0010

No column changes: the new step status `ready` is text like the others. `ix_runs_user_active`
serves the active-run count at submit and a user's queued and running runs at dispatch;
`ix_runs_user_created` the submits of the last minute (`models.engine.quotas`,
`models.engine.dispatch`). Steps are found by the existing indexes on `status` and `run_id`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_user_active",
        "runs",
        ["user_id"],
        postgresql_where=sa.text("status NOT IN ('succeeded', 'failed', 'cancelled')"),
    )
    op.create_index("ix_runs_user_created", "runs", ["user_id", "created_at"])


def downgrade() -> None:
    # The code before this revision knows no `ready`: such steps go back to `pending`, and its
    # coordinator enqueues them again.
    op.execute("UPDATE steps SET status = 'pending' WHERE status = 'ready'")
    op.drop_index("ix_runs_user_created", table_name="runs")
    op.drop_index("ix_runs_user_active", table_name="runs")
