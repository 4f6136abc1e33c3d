"""Steps by `(status, id)` instead of `status` alone, and a run's unfinished steps (issue 10).

Revision ID: 0013
Revises: 0012

Measured in a new database (no statistics yet: autovacuum had not analyzed the tables) with a
backlog of 200 five-step runs of one user: the dispatch's ready-step query joined each of the 196
ready steps to every run of the user (3.2 ms); with `(status, id)` it reads ready steps in id
order and stops at the free slots (0.03 ms). `ix_steps_unfinished` lets the dispatch find a
running run with no step left to run by one index probe per run, where a planner without
statistics scanned the steps table once per running run (2.5 ms with 67 runs running).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

UNFINISHED = "status IN ('pending', 'ready', 'queued', 'running')"


def upgrade() -> None:
    op.create_index("ix_steps_status_id", "steps", ["status", "id"])
    op.drop_index("ix_steps_status", table_name="steps")
    op.create_index(
        "ix_steps_unfinished",
        "steps",
        ["run_id"],
        postgresql_where=sa.text(UNFINISHED),
    )


def downgrade() -> None:
    op.drop_index("ix_steps_unfinished", table_name="steps")
    op.create_index("ix_steps_status", "steps", ["status"])
    op.drop_index("ix_steps_status_id", table_name="steps")
