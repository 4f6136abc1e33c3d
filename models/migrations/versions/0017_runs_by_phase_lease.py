"""Runs by their phase claim's lease, for the reconciler (issue 11).

Revision ID: 0017
Revises: 0016

A memory task killed while it held its run's extraction claim left the run unremembered: the
redelivery of its message found the lease still live and did nothing, and the reconciler asked
again only once, `AGENTQ_PHASE_STALE_S` after the run ended. The reconciler now also asks for
the memory of a run whose claim's lease ran out since its previous tick
(`models.engine.held.unremembered_runs`), reading runs by `phase_lease_expires_at`; only runs a
worker holds (or held) a claim on have one, so the index is small.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_phase_lease",
        "runs",
        ["phase_lease_expires_at"],
        postgresql_where=sa.text("phase_lease_expires_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_phase_lease", table_name="runs")
