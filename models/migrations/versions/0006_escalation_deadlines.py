"""Escalation deadlines: when an undecided escalation's safe default applies, and when it did.

Revision ID: 0006
Revises: 0005

Escalations that are undecided when this runs get a deadline of now plus
`AGENTQ_ESCALATION_TIMEOUT_S`, not their opening time plus it: the deadline rule did not exist
when they were opened, so the clock starts at the upgrade rather than rejecting (or flagging) a
backlog the moment the scheduler's beat first runs. Decided escalations keep no deadline.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

DUE_INDEX = "ix_escalations_deadline_due"


def upgrade() -> None:
    from models.settings import get_settings

    op.add_column("escalations", sa.Column("deadline_at", sa.DateTime(timezone=True)))
    op.add_column("escalations", sa.Column("deadline_passed_at", sa.DateTime(timezone=True)))
    op.execute(
        sa.text(
            "UPDATE escalations SET deadline_at = now() + make_interval(secs => :timeout_s) "
            "WHERE status <> 'decided'"
        ).bindparams(timeout_s=get_settings().escalation_timeout_s)
    )
    # What the beat scans: undecided escalations whose deadline has not been handled yet.
    op.create_index(
        DUE_INDEX,
        "escalations",
        ["deadline_at"],
        postgresql_where=sa.text("status <> 'decided' AND deadline_passed_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index(DUE_INDEX, table_name="escalations")
    op.drop_column("escalations", "deadline_passed_at")
    op.drop_column("escalations", "deadline_at")
