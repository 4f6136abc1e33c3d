"""Ended runs by the time they ended, for the reconciler (issue 11).

Revision ID: 0016
Revises: 0015

A run's memory task is asked for by one message sent after the run ended; a broker that lost it
(restarted empty, or down when it was sent) left the run without its episode and facts for good.
The reconciler now sends it again for a run that ended a while ago and whose memory task has not
ended (`models.engine.held.unremembered_runs`), reading recent ended runs by `finished_at`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_finished",
        "runs",
        ["finished_at"],
        postgresql_where=sa.text("finished_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_finished", table_name="runs")
