"""Working memory: a run's turns with their token counts, and its rolling summaries.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _created() -> sa.Column[sa.DateTime]:
    return sa.Column(
        "created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
    )


def upgrade() -> None:
    op.create_table(
        "messages",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("step_id", sa.Integer(), nullable=True),
        sa.Column("role", sa.String(length=10), nullable=False),
        sa.Column("content", sa.String(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        _created(),
        sa.CheckConstraint("role IN ('user', 'assistant', 'tool')", name="messages_role"),
    )
    op.create_index("ix_messages_run_id", "messages", ["run_id"])
    op.create_index("ix_messages_user_id", "messages", ["user_id"])
    op.create_table(
        "run_summaries",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("user_id", sa.String(length=200), nullable=False),
        sa.Column("covers_through_id", sa.Integer(), nullable=False),
        sa.Column("content", sa.String(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        _created(),
    )
    op.create_index("ix_run_summaries_run_id", "run_summaries", ["run_id"])
    op.create_index("ix_run_summaries_user_id", "run_summaries", ["user_id"])


def downgrade() -> None:
    op.drop_table("run_summaries")
    op.drop_table("messages")
