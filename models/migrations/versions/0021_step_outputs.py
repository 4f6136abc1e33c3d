"""A model step's typed answer fields: `steps.output` (issue 12, item 4).

Revision ID: 0021
Revises: 0020

A model step may declare the fields of its answer and their types (`models.plans.step_outputs`); the
worker asks for JSON of them and stores the fields as the step's result. Steps written before
this revision declare none (null).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("steps", sa.Column("output", JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("steps", "output")
