"""The should-replan check: `runs.replan_check` and `plan_checks` (issue 12, item 2).

Revision ID: 0023
Revises: 0022

A run submitted with `replan_check = 'model'` asks the model, after each step that succeeds
while others have not started, whether the rest of the plan still makes sense; each answer is a
`plan_checks` row the coordinator reads (`models.plans.plan_checks`). Runs before this revision
never check (`off`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column("replan_check", sa.String(10), nullable=False, server_default="off"),
    )
    op.create_table(
        "plan_checks",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "run_id", sa.Integer(), sa.ForeignKey("runs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("plan_version", sa.Integer(), nullable=False),
        sa.Column(
            "step_id", sa.Integer(), sa.ForeignKey("steps.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("verdict", sa.String(20), nullable=False),
        sa.Column("reason", sa.String(1000), nullable=False),
        sa.Column("source", sa.String(40), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()
        ),
    )
    op.create_index("ix_plan_checks_run_id", "plan_checks", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_plan_checks_run_id", table_name="plan_checks")
    op.drop_table("plan_checks")
    op.drop_column("runs", "replan_check")
