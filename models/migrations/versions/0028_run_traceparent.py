"""The trace of a run: `runs.traceparent` (issue 15, part 2).

Revision ID: 0028
Revises: 0027

The W3C traceparent (`00-<trace id>-<span id>-<flags>`, 55 characters) of the span that submitted
the run, written at submit (`models.engine.tracing`). A task of the run, whoever sent it, starts its
span under this trace. Runs submitted before this migration keep NULL and trace as they did.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

COMMENT = (
    "W3C traceparent of the span that submitted the run: every task of the run joins its trace "
    "(models/engine/tracing.py)."
)


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("traceparent", sa.String(length=55), nullable=True, comment=COMMENT)
    )


def downgrade() -> None:
    op.drop_column("runs", "traceparent")
