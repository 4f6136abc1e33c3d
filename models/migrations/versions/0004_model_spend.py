"""Model spend per step, and rate-limit deferrals of steps and run phases.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "steps", sa.Column("tokens_used", sa.Integer(), nullable=False, server_default="0")
    )
    op.add_column(
        "steps", sa.Column("cost_used_usd", sa.Float(), nullable=False, server_default="0")
    )
    op.add_column("steps", sa.Column("deferrals", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("runs", sa.Column("deferrals", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    op.drop_column("runs", "deferrals")
    op.drop_column("steps", "deferrals")
    op.drop_column("steps", "cost_used_usd")
    op.drop_column("steps", "tokens_used")
