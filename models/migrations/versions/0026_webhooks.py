"""Webhooks from a Postgres outbox: `webhook_subscriptions`, `webhook_deliveries`,
`webhook_attempts` (issue 15, part 4).

Revision ID: 0026
Revises: 0025

A subscription names a URL, the events it is told of and, optionally, the one user whose runs
it follows; its secret stays in the settings (`secret_ref` names it). A delivery is written in
the transaction of the change it reports (`models.engine.notifications`) and sent by the scheduler's
beat (`scheduler.webhooks`); each attempt is logged. Nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None


def _at(name: str, *, nullable: bool = False, now: bool = False) -> sa.Column[sa.DateTime]:
    default = sa.text("now()") if now else None
    return sa.Column(name, sa.DateTime(timezone=True), server_default=default, nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "webhook_subscriptions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("events", postgresql.ARRAY(sa.String(length=40)), nullable=False),
        sa.Column("user_id", sa.String(length=200), nullable=True),
        sa.Column("secret_ref", sa.String(length=100), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        _at("created_at", now=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("key", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("subscription_id", sa.Integer(), nullable=False),
        sa.Column("event", sa.String(length=40), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("body", sa.String(), nullable=False),
        sa.Column("status", sa.String(length=20), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        _at("created_at", now=True),
        _at("updated_at", now=True),
        _at("next_attempt_at", now=True),
        _at("give_up_at"),
        _at("lease_expires_at", nullable=True),
        _at("delivered_at", nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(
            ["subscription_id"], ["webhook_subscriptions.id"], ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("key"),
    )
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=sa.text("status IN ('pending', 'delivering')"),
    )
    op.create_index("ix_webhook_deliveries_created", "webhook_deliveries", ["created_at"])
    op.create_index(
        "ix_webhook_deliveries_subscription_id", "webhook_deliveries", ["subscription_id"]
    )
    op.create_index("ix_webhook_deliveries_run_id", "webhook_deliveries", ["run_id"])
    op.create_table(
        "webhook_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("delivery_id", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        _at("started_at"),
        sa.Column("duration_ms", sa.Float(), nullable=True),
        sa.Column("status_code", sa.Integer(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.ForeignKeyConstraint(["delivery_id"], ["webhook_deliveries.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("delivery_id", "attempt", name="webhook_attempts_once"),
    )
    op.create_index("ix_webhook_attempts_delivery_id", "webhook_attempts", ["delivery_id"])


def downgrade() -> None:
    op.drop_table("webhook_attempts")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhook_subscriptions")
