"""Child runs: steps of kind `run`, which submit a run of their own (issue 32, item 3).

Revision ID: 0040
Revises: 0039

A step of kind `run` submits a child run and waits for it (`waiting_child`, a new step status;
`models.engine.children`); `run_children` links each child to its parent run and step.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_children",
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
            comment="The child run (runs.id).",
        ),
        sa.Column(
            "parent_run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
            comment="The run whose step submitted it (runs.id).",
        ),
        sa.Column(
            "parent_step_id",
            sa.Integer(),
            nullable=False,
            comment="That step (steps.id, of kind run): it ends with the child.",
        ),
        sa.Column(
            "depth",
            sa.Integer(),
            nullable=False,
            comment="How deep the child is: 1 for a child of a submitted run.",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When the child was submitted.",
        ),
        sa.UniqueConstraint("parent_step_id"),
    )
    op.create_index("ix_run_children_parent_run_id", "run_children", ["parent_run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_children_parent_run_id", table_name="run_children")
    op.drop_table("run_children")
