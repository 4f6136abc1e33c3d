"""Step-data budgets per run and per user (issue 27, item 5).

Revision ID: 0030
Revises: 0029

- `runs.step_data_bytes`: the step data the run's steps hold (results, journaled tool calls,
  reviewers' answers), bytes of compact JSON; `runs.step_data_limit_bytes`: its budget,
  `AGENTQ_RUN_STEP_DATA_MAX_BYTES` at submit (`models.engine.storage`).
- `user_step_data`: what all runs of a user hold together, checked against
  `AGENTQ_USER_STEP_DATA_MAX_BYTES`.

Existing runs are backfilled from what they store now: their steps' results and journaled tool
calls, measured as Postgres prints them (`jsonb::text`, a little larger than compact JSON, so a
run is counted a little over, never under). Their budget is the default, or what they hold if
that is more, so no run in flight is over its budget by this migration alone. Each user's total
is the sum of their runs'. The columns' defaults are only for this backfill: agentq writes both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

DEFAULT_LIMIT_BYTES = 8 * 1024 * 1024  # AGENTQ_RUN_STEP_DATA_MAX_BYTES's default
USED = "Step data its steps hold (results, tool calls, answers), bytes (models/engine/storage.py)."
LIMIT = (
    "Step-data budget, bytes: AGENTQ_RUN_STEP_DATA_MAX_BYTES at submit (models/engine/storage.py)."
)
TABLE = "Step data all runs of a user hold together (models/engine/storage.py: UserStepData)."
USER = "The agentq user (tenant) it belongs to."
BYTES = "Bytes of compact JSON; checked against AGENTQ_USER_STEP_DATA_MAX_BYTES."

BACKFILL_RUNS = """
UPDATE runs r SET step_data_bytes = held.bytes
FROM (
    SELECT s.run_id,
        sum(coalesce(octet_length(nullif(s.result, 'null'::jsonb)::text), 0) + coalesce(j.bytes, 0))
            AS bytes
    FROM steps s LEFT JOIN (
        SELECT step_id, sum(octet_length(arguments::text)
            + coalesce(octet_length(result::text), octet_length(error), 0)) AS bytes
        FROM tool_journal GROUP BY step_id
    ) j ON j.step_id = s.id
    GROUP BY s.run_id
) held
WHERE r.id = held.run_id AND held.bytes > 0"""
BACKFILL_LIMITS = (
    "UPDATE runs SET step_data_limit_bytes = step_data_bytes "
    "WHERE step_data_bytes > step_data_limit_bytes"
)
BACKFILL_USERS = """
INSERT INTO user_step_data (user_id, bytes)
SELECT user_id, sum(step_data_bytes) FROM runs GROUP BY user_id HAVING sum(step_data_bytes) > 0"""


def upgrade() -> None:
    op.add_column(
        "runs",
        sa.Column("step_data_bytes", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column(
        "runs",
        sa.Column(
            "step_data_limit_bytes",
            sa.BigInteger(),
            server_default=str(DEFAULT_LIMIT_BYTES),
            nullable=False,
        ),
    )
    op.create_table(
        "user_step_data",
        sa.Column("user_id", sa.String(length=200), primary_key=True, comment=USER),
        sa.Column("bytes", sa.BigInteger(), nullable=False, comment=BYTES),
        comment=TABLE,
    )
    op.execute(sa.text(BACKFILL_RUNS))
    op.execute(sa.text(BACKFILL_LIMITS))
    op.execute(sa.text(BACKFILL_USERS))
    for column, comment in (("step_data_bytes", USED), ("step_data_limit_bytes", LIMIT)):
        op.alter_column("runs", column, server_default=None, comment=comment)


def downgrade() -> None:
    op.drop_table("user_step_data")
    op.drop_column("runs", "step_data_limit_bytes")
    op.drop_column("runs", "step_data_bytes")
