"""Plans are graphs: `plan_versions.after`, what each step of a version waits for (issue 10).

Revision ID: 0012
Revises: 0011

Every version written before this revision was a list, run in order, in which the coordinator
walked past a failed step that a version had answered (`replaces_step_id`). Each gets the graph
that meant: a step waits for the step before it, skipping the failed steps answered by this
version or an earlier one of its run (the steps put in their place take over), so a run that was
under way when the database was upgraded goes on as it would have.
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def legacy_graph(step_ids: list[int], answered: set[int]) -> dict[str, list[int]]:
    """The chain a list version meant: each step waits for the nearest step before it that is
    not an answered failure."""
    after: dict[str, list[int]] = {}
    previous: int | None = None
    for step_id in step_ids:
        after[str(step_id)] = [] if previous is None else [previous]
        if step_id not in answered:
            previous = step_id
    return after


def upgrade() -> None:
    op.add_column(
        "plan_versions",
        sa.Column(
            "after",
            postgresql.JSONB(astext_type=sa.Text()),
            nullable=False,
            server_default=sa.text("'{}'::jsonb"),
        ),
    )
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, run_id, step_ids, replaces_step_id FROM plan_versions "
            "ORDER BY run_id, version"
        )
    ).all()
    answered: dict[int, set[int]] = {}
    for version_id, run_id, step_ids, replaces in rows:
        seen = answered.setdefault(run_id, set())
        if replaces is not None:
            seen.add(replaces)
        bind.execute(
            sa.text("UPDATE plan_versions SET after = CAST(:after AS jsonb) WHERE id = :id"),
            {"after": json.dumps(legacy_graph(list(step_ids), seen)), "id": version_id},
        )


def downgrade() -> None:
    op.drop_column("plan_versions", "after")
