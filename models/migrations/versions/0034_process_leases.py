"""The beat's lease as a row: `process_leases` (issue 29, item 4).

Revision ID: 0034
Revises: 0033

A beat sends only while it holds the lease `beat` (`models.process_leases`), a row it renews,
instead of a session-level advisory lock, which a transaction pooler (PgBouncer,
`pool_mode=transaction`) leaves on a pooled server connection after a clean stop.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

TABLE = (
    "Roles only one process of the database may have at a time, each held until it expires "
    "(models/process_leases.py): beat, the scheduler's beat that sends the periodic tasks."
)
COLUMNS = {
    "name": "The role: beat.",
    "holder": "The process holding it: <host>:<pid>:<random>.",
    "expires_at": "When another process may take it, unless its holder renews it first (UTC).",
    "taken_at": "When its holder took it (UTC).",
}


def upgrade() -> None:
    op.create_table(
        "process_leases",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("holder", sa.String(length=200), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.execute(f"COMMENT ON TABLE process_leases IS {_literal(TABLE)}")
    for column, text in COLUMNS.items():
        op.execute(f'COMMENT ON COLUMN process_leases."{column}" IS {_literal(text)}')


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def downgrade() -> None:
    op.drop_table("process_leases")
