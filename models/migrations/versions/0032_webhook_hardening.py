"""Webhooks: a secret and a circuit breaker per subscription; an outbox with no user text.

Revision ID: 0032
Revises: 0031

- `webhook_subscriptions.secret`: the subscription's own signing secret. Existing rows keep
  `secret_ref` (now nullable) and sign with the shared secret it names until `agentq webhook
  rotate` gives them their own, so their receivers keep verifying; exactly one of the two is set
  (`webhook_subscriptions_one_secret`).
- `webhook_subscriptions.failures` and `circuit_open_until`: the circuit breaker
  (`models.operations.circuit_breakers`); existing rows start closed.
- `webhook_deliveries.snapshot` replaces `body`: what the event says, without the run's goal and
  error, which each attempt reads from the run's row (`models.engine.notifications.body`). Existing
  bodies are converted (the goal and error dropped), so no delivery keeps a copy of them.
- The receivers' response bodies quoted in `last_error` and `webhook_attempts.error` ("HTTP 500:
  ...") are cut to the status ("HTTP 500"): only status codes are kept now.

Downgrade rebuilds `body` from the snapshot and the run's row, and gives rows with a secret of
their own the shared secret "default" back (they sign with AGENTQ_WEBHOOK_SECRET again).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

SUBSCRIPTIONS = "webhook_subscriptions"
DELIVERIES = "webhook_deliveries"
ONE_SECRET = "webhook_subscriptions_one_secret"
COMMENTS = {
    "secret": "The subscription's own signing secret (whsec_...); NULL: a shared one, secret_ref.",
    "secret_ref": "The shared secret of the settings that signs for an older subscription.",
    "failures": "Consecutive failed attempts (models/operations/circuit_breakers.py).",
    "circuit_open_until": "Circuit breaker: NULL closed; later than now open; past: half-open.",
    "snapshot": "What the event says (ids, statuses, times); the body adds the run's goal.",
}
TO_SNAPSHOT = f"""
UPDATE {DELIVERIES} SET snapshot = CAST(body AS jsonb) #- '{{run,goal}}' #- '{{run,error}}'
"""
STATUS_ONLY = r"""
UPDATE {table} SET {column} = substring({column} from '^HTTP [0-9]+')
WHERE {column} ~ '^HTTP [0-9]+: '
"""
TO_BODY = f"""
UPDATE {DELIVERIES} d SET body = CAST(jsonb_set(jsonb_set(d.snapshot, '{{run,goal}}',
    to_jsonb(left(coalesce((SELECT r.goal FROM runs r WHERE r.id = d.run_id), ''), 500))),
    '{{run,error}}', coalesce((SELECT to_jsonb(r.error) FROM runs r WHERE r.id = d.run_id),
    'null'::jsonb)) AS text)
"""


def upgrade() -> None:
    secret = sa.Column("secret", sa.String(length=100), nullable=True, comment=COMMENTS["secret"])
    op.add_column(SUBSCRIPTIONS, secret)
    op.alter_column(
        SUBSCRIPTIONS,
        "secret_ref",
        existing_type=sa.String(100),
        nullable=True,
        comment=COMMENTS["secret_ref"],
    )
    op.create_check_constraint(
        ONE_SECRET, SUBSCRIPTIONS, "(secret IS NULL) <> (secret_ref IS NULL)"
    )
    failures = sa.Column(
        "failures",
        sa.Integer(),
        server_default=sa.text("0"),
        nullable=False,
        comment=COMMENTS["failures"],
    )
    op.add_column(SUBSCRIPTIONS, failures)
    open_until = sa.Column(
        "circuit_open_until",
        sa.DateTime(timezone=True),
        nullable=True,
        comment=COMMENTS["circuit_open_until"],
    )
    op.add_column(SUBSCRIPTIONS, open_until)
    snapshot = sa.Column(
        "snapshot", postgresql.JSONB(), nullable=True, comment=COMMENTS["snapshot"]
    )
    op.add_column(DELIVERIES, snapshot)
    op.execute(TO_SNAPSHOT)
    op.alter_column(DELIVERIES, "snapshot", nullable=False)
    op.drop_column(DELIVERIES, "body")
    op.execute(STATUS_ONLY.format(table=DELIVERIES, column="last_error"))
    op.execute(STATUS_ONLY.format(table="webhook_attempts", column="error"))


def downgrade() -> None:
    op.add_column(DELIVERIES, sa.Column("body", sa.String(), nullable=True))
    op.execute(TO_BODY)
    op.alter_column(DELIVERIES, "body", nullable=False)
    op.drop_column(DELIVERIES, "snapshot")
    op.drop_column(SUBSCRIPTIONS, "circuit_open_until")
    op.drop_column(SUBSCRIPTIONS, "failures")
    op.drop_constraint(ONE_SECRET, SUBSCRIPTIONS, type_="check")
    op.execute(f"UPDATE {SUBSCRIPTIONS} SET secret_ref = 'default' WHERE secret_ref IS NULL")
    op.alter_column(SUBSCRIPTIONS, "secret_ref", existing_type=sa.String(100), nullable=False)
    op.drop_column(SUBSCRIPTIONS, "secret")
