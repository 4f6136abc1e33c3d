"""Forget is final, and users own their memory: erasure points, fact sources, who pinned what.

Revision ID: 0009
Revises: 0008

Issue 9, findings 4 and 5:
- `memory_erasures`: one row per forgotten user, the newest forget's time. Memory writes of runs
  created at or before it are dropped (`models.memory.erasures`), so a run in flight cannot write a
  forgotten user's memory again. No row exists before this revision: nothing is backfilled.
- `facts.source`: where a fact came from, `run:<id>` (a run's extraction) or `reviewer:<name>` (a
  reviewer's answer, remembered at their request). Existing facts with a source run get
  `run:<id>`; the others `unknown`.
- `pinned_facts.set_by`: `user` (the submitter's statement) or `reviewer:<name>`; only the user's
  own become memory. Existing `reviewer_answer` rows of runs with a `respond` decision on no
  failed step were pinned by that answer: they get `reviewer:<who decided>` (the latest such
  decision). Every other row, a `reviewer_answer` the user pinned included, is the user's.
- `escalations.remember_answer`: the reviewer asked that a `respond` answer become a fact. False
  for every decision made before this revision (none asked).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "memory_erasures",
        sa.Column("user_id", sa.String(length=200), primary_key=True),
        sa.Column(
            "erased_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
    )
    op.add_column(
        "facts",
        sa.Column("source", sa.String(length=220), server_default="unknown", nullable=False),
    )
    op.execute(
        sa.text("UPDATE facts SET source = 'run:' || source_run_id WHERE source_run_id IS NOT NULL")
    )
    op.add_column(
        "pinned_facts",
        sa.Column("set_by", sa.String(length=200), server_default="user", nullable=False),
    )
    op.execute(
        sa.text(
            "UPDATE pinned_facts AS p "
            "SET set_by = 'reviewer:' || coalesce(e.decided_by, 'unknown') "
            "FROM (SELECT DISTINCT ON (run_id) run_id, decided_by FROM escalations"
            "  WHERE decision = 'respond' AND step_id IS NULL"
            "  ORDER BY run_id, decided_at DESC NULLS LAST) AS e "
            "WHERE p.key = 'reviewer_answer' AND p.run_id = e.run_id"
        )
    )
    op.add_column(
        "escalations",
        sa.Column("remember_answer", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("escalations", "remember_answer")
    op.drop_column("pinned_facts", "set_by")
    op.drop_column("facts", "source")
    op.drop_table("memory_erasures")
