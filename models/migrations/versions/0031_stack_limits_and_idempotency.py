"""Limits that are the stack's, submit idempotency keys, and the budgets an approval set
(issue 27, items 11 to 13).

Revision ID: 0031
Revises: 0030

- `stack_limits`: the quotas, the dispatch cap and the default budgets and their ceilings as
  the process that owns the stack wrote them (`agentq up`, a deployment's `agentq migrate`);
  every submit and every worker reads them there (`models.engine.stack_limits`). Empty until an
  owner writes it: until then each process keeps its own settings, as before.
- `idempotency_keys`: a submit's `Idempotency-Key` by who sent it, the run it made and the
  answer it was given (`models.engine.idempotency`); deleted with their run.
- `escalations.granted`: the budgets an approval set (`models.engine.budget_grants`); NULL for the
  escalations decided before, whose grants only the run's events tell.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

TABLES = {
    "stack_limits": "The limits that protect the stack, as its owner wrote them "
    "(models/engine/stack_limits.py): read by every submit and worker, whatever their environment.",
    "idempotency_keys": "Idempotency-Key of a submit, by who sent it: the run it made and the "
    "answer it was given (models/engine/idempotency.py).",
}
COLUMNS = {
    "stack_limits": {
        "name": "The setting, as its Settings field (user_max_active_runs is "
        "AGENTQ_USER_MAX_ACTIVE_RUNS).",
        "value": "Its value (JSON).",
        "set_by": "Who wrote it: agentq up (pid N), agentq migrate.",
        "set_at": "When it was written (UTC).",
    },
    "idempotency_keys": {
        "scope": "Whose key: token:<API token id>, or user:<user> for the CLI.",
        "key": "The Idempotency-Key, as sent.",
        "request_sha256": "SHA-256 of the request it came with (canonical JSON).",
        "run_id": "The run it made (runs.id).",
        "response": "The answer that run was given (the run as the API showed it).",
        "notified": "Whether that answer's messages were sent; NULL: not recorded.",
        "created_at": "When the key was first used (UTC).",
        "expires_at": "When it stops answering (AGENTQ_IDEMPOTENCY_WINDOW_S after).",
    },
}
GRANTED = (
    'The budgets the approval set, by name: {"tokens": {"used", "limit_before", "limit", '
    '"chosen": "reviewer" | "default"}}; NULL when it set none.'
)


def upgrade() -> None:
    op.create_table(
        "stack_limits",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("value", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("set_by", sa.String(length=200), nullable=False),
        sa.Column(
            "set_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("scope", sa.String(length=210), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("request_sha256", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("response", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("notified", sa.Boolean(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("scope", "key"),
    )
    op.create_index("ix_idempotency_keys_run_id", "idempotency_keys", ["run_id"])
    op.add_column(
        "escalations",
        sa.Column(
            "granted", postgresql.JSONB(astext_type=sa.Text()), nullable=True, comment=GRANTED
        ),
    )
    for table, about in TABLES.items():
        op.execute(f"COMMENT ON TABLE {table} IS {_literal(about)}")
        for column, text in COLUMNS[table].items():
            op.execute(f'COMMENT ON COLUMN {table}."{column}" IS {_literal(text)}')


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def downgrade() -> None:
    op.drop_column("escalations", "granted")
    op.drop_index("ix_idempotency_keys_run_id", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    op.drop_table("stack_limits")
