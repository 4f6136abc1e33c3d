"""Procedures learned from runs, and demoted when they stop working (issue 31).

Revision ID: 0037
Revises: 0036

A run that succeeded after a replan or a reviewer's answer or edit teaches its user a procedure
(`models.memory.procedure_learning`): `origin` says whether a person wrote a procedure's version
or agentq learned it. A procedure whose adopted plan then needed a replan loses rank and, after
`AGENTQ_PROCEDURE_RETIRE_AFTER` such runs in a row, is retired (kept, not recalled); each adopted
run's outcome is a row of `procedure_outcomes`, the evidence (`models.memory.procedure_outcomes`).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

ORIGIN = "Who wrote this version: person (a person saved or wrote it) or learned (from a run)."


def upgrade() -> None:
    for table in ("procedures", "procedure_versions"):
        op.add_column(
            table,
            sa.Column(
                "origin",
                sa.String(length=10),
                server_default="person",
                nullable=False,
                comment=ORIGIN,
            ),
        )
    op.add_column(
        "procedures",
        sa.Column(
            "failures",
            sa.Integer(),
            server_default="0",
            nullable=False,
            comment="Runs in a row whose adopted plan of this version needed a replan or failed.",
        ),
    )
    op.add_column(
        "procedures",
        sa.Column(
            "retired_at",
            sa.DateTime(timezone=True),
            nullable=True,
            comment="When repeated failures retired it (kept, never recalled); NULL: active.",
        ),
    )
    op.create_table(
        "procedure_outcomes",
        sa.Column("id", sa.Integer(), primary_key=True, comment="The outcome's id."),
        sa.Column(
            "procedure_id",
            sa.Integer(),
            sa.ForeignKey("procedures.id", ondelete="CASCADE"),
            nullable=False,
            comment="The procedure a run adopted (procedures.id).",
        ),
        sa.Column("version", sa.Integer(), nullable=False, comment="The version it adopted."),
        sa.Column(
            "run_id",
            sa.Integer(),
            sa.ForeignKey("runs.id", ondelete="CASCADE"),
            nullable=False,
            comment="The run that adopted it (runs.id).",
        ),
        sa.Column(
            "outcome",
            sa.String(length=20),
            nullable=False,
            comment="held (the run needed no replan), replanned, or failed.",
        ),
        sa.Column("detail", sa.String(), nullable=False, comment="What happened, in words."),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.func.now(),
            nullable=False,
            comment="When the run's memory recorded it.",
        ),
        sa.UniqueConstraint("procedure_id", "run_id", name="procedure_outcomes_run"),
    )
    op.create_index("ix_procedure_outcomes_procedure_id", "procedure_outcomes", ["procedure_id"])
    op.create_index("ix_procedure_outcomes_run_id", "procedure_outcomes", ["run_id"])


def downgrade() -> None:
    op.drop_table("procedure_outcomes")
    op.drop_column("procedures", "retired_at")
    op.drop_column("procedures", "failures")
    for table in ("procedure_versions", "procedures"):
        op.drop_column(table, "origin")
