"""Conversation context for facts: `facts.thread` and `facts.position` (issue 13).

Revision ID: 0024
Revises: 0023

A fact written from a conversation turn names its thread (a conversation or one session of it)
and its position there, so recall can score a turn with the turns around it
(`models.memory.rerank`). Facts before this revision have neither (NULL: no neighbours).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("facts", sa.Column("thread", sa.String(200), nullable=True))
    op.add_column("facts", sa.Column("position", sa.Integer(), nullable=True))
    op.create_check_constraint(
        "facts_thread_position", "facts", "(thread IS NULL) = (position IS NULL) AND position >= 0"
    )
    op.create_index(
        "facts_thread",
        "facts",
        ["user_id", "thread", "position"],
        postgresql_where=sa.text("thread IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("facts_thread", table_name="facts")
    op.drop_constraint("facts_thread_position", "facts")
    op.drop_column("facts", "position")
    op.drop_column("facts", "thread")
