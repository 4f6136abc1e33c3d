"""Approvals before effects: `tool_approvals` and `run_approvals` (issue 30).

Revision ID: 0036
Revises: 0035

A tool call the approval policy gates stops before it runs: its row waits for a reviewer's
decision, which the step's next attempt reads before the call (`models.approvals.calls`). A run
may tighten the operator's policy at submit (`run_approvals`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "tool_approvals",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "step_id", sa.Integer(), sa.ForeignKey("steps.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("call_key", sa.String(length=200), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("arguments", JSONB(), nullable=False),
        sa.Column("why", sa.String(), nullable=False),
        sa.Column("resume", JSONB(), nullable=True),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("arguments_used", JSONB(), nullable=True),
        sa.Column("answer", JSONB(), nullable=True),
        sa.Column("comment", sa.String(), nullable=True),
        sa.Column("decided_by", sa.String(), nullable=True),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.UniqueConstraint("step_id", "call_key", name="tool_approvals_call"),
    )
    op.create_index("ix_tool_approvals_run_id", "tool_approvals", ["run_id"])
    op.create_table(
        "run_approvals",
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("rules", JSONB(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("run_approvals")
    op.drop_index("ix_tool_approvals_run_id", table_name="tool_approvals")
    op.drop_table("tool_approvals")
