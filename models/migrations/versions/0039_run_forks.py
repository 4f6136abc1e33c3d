"""Forked runs: where a run forked from a step came from (issue 32, item 1).

Revision ID: 0039
Revises: 0038

`agentq run fork N --from STEP` makes a run whose steps before STEP keep run N's results
(`models.engine.forks`); `run_forks` keeps the source run and step, and which steps were copied.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "run_forks",
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            primary_key=True,
            comment="The forked run (runs.id).",
        ),
        sa.Column(
            "from_run_id",
            sa.Integer(),
            nullable=False,
            comment="The run it was forked from (runs.id; kept after that run is purged).",
        ),
        sa.Column(
            "from_step_id",
            sa.Integer(),
            nullable=False,
            comment="The step it was forked from (steps.id, of the source run).",
        ),
        sa.Column(
            "from_step",
            sa.String(length=100),
            nullable=False,
            comment="That step's name; it and every step waiting for it ran anew.",
        ),
        sa.Column(
            "copied",
            JSONB(),
            nullable=False,
            comment="The copied steps: this run's step id (text) -> the source's step id.",
        ),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When the fork was made.",
        ),
    )
    op.create_index("ix_run_forks_from_run_id", "run_forks", ["from_run_id"])


def downgrade() -> None:
    op.drop_index("ix_run_forks_from_run_id", table_name="run_forks")
    op.drop_table("run_forks")
