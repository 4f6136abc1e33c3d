"""The tool journal: each tool call of a model step, with its result (issue 11, item 3).

Revision ID: 0015
Revises: 0014

A model step deferred (or retried) after one of its tool calls ran asked the model again from
the start, and the tool ran a second time. Each call is now journaled once its tool returns
(`models.engine.tool_journal`), and a replayed loop reuses the recorded result. Steps under way when
the database was upgraded have no journal: their calls so far are not replayed.
"""

from __future__ import annotations

import sqlalchemy as sa
import sqlmodel
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_journal",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=False),
        sa.Column("call_key", sqlmodel.sql.sqltypes.AutoString(length=200), nullable=False),
        sa.Column("tool", sqlmodel.sql.sqltypes.AutoString(length=100), nullable=False),
        sa.Column("arguments", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("error", sqlmodel.sql.sqltypes.AutoString(), nullable=True),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(["step_id"], ["steps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("step_id", "call_key"),
    )


def downgrade() -> None:
    op.drop_table("tool_journal")
