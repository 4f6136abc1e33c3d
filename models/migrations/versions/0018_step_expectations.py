"""Checks of a step's result: `steps.expect` (issue 12, item 2).

Revision ID: 0018
Revises: 0017

A plan step may declare expectations on its result (`models.plans.expectations`), which the worker
checks when the step's tool or model returns: one unmet fails the step. Steps written before
this revision declare none.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "steps",
        sa.Column("expect", JSONB(), nullable=False, server_default=sa.text("'[]'::jsonb")),
    )


def downgrade() -> None:
    op.drop_column("steps", "expect")
