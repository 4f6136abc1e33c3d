"""The webhook tables (issue 15): who is told of what (`webhook_subscriptions`, with each
receiver's secret and circuit breaker), the outbox of what is to be told (`webhook_deliveries`,
one row per subscription and event, written in the transaction of the change it reports:
`models.engine.notifications`) and every attempt to tell it (`webhook_attempts`, the delivery log).
Migrations 0026 and 0032.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import ARRAY, JSONB
from sqlmodel import Field, SQLModel

from models.tables import created_field, timestamp_field

# What `webhook_deliveries.status` may hold: waiting for a sender, leased by one, told, given up.
DELIVERY_STATUSES: Final = ("pending", "delivering", "delivered", "failed")


class WebhookSubscription(SQLModel, table=True):
    """A URL told of `events` (`models.engine.notifications.EVENTS`) of one user's runs, or of every
    user's (`user_id` NULL). `secret` signs its bodies: generated for it alone, shown once
    (`models.operations.webhooks`). A subscription made before that has none, and `secret_ref` names
    the shared secret of the settings that signs for it until it is rotated (`AGENTQ_WEBHOOK_SECRET`
    for "default", else a key of `AGENTQ_WEBHOOK_SECRETS`); exactly one of the two is set.
    `failures` counts its consecutive failed attempts, and `circuit_open_until` is its circuit
    breaker: NULL closed, later than now open (nothing is sent), past half-open (one probe is
    sent; `models.operations.circuit_breakers`)."""

    __tablename__ = "webhook_subscriptions"
    __table_args__ = (
        sa.CheckConstraint(
            "(secret IS NULL) <> (secret_ref IS NULL)", name="webhook_subscriptions_one_secret"
        ),
    )
    id: int | None = Field(default=None, primary_key=True)
    url: str = Field(max_length=2000)
    events: list[str] = Field(sa_type=ARRAY(sa.String(length=40)), nullable=False)
    user_id: str | None = Field(default=None, max_length=200)
    secret: str | None = Field(default=None, max_length=100)
    secret_ref: str | None = Field(default=None, max_length=100)
    enabled: bool = True
    created_at: datetime = created_field()
    failures: int = Field(default=0, sa_column_kwargs={"server_default": sa.text("0")})
    circuit_open_until: datetime | None = timestamp_field()


class WebhookDelivery(SQLModel, table=True):
    """One event for one subscription: `snapshot` is what the event says (ids, statuses, times:
    no user text), from which each attempt builds its body with the run's goal and error as
    the run's row holds them then (`models.engine.notifications.body`), `key` its `Idempotency-Key`.
    Status `pending` (due at `next_attempt_at`), `delivering` (a sender holds it until
    `lease_expires_at`; an expired lease is claimed again), `delivered` or `failed` (given up
    at `give_up_at`, the end of the retry window). `attempts` counts the claims so far
    (`models.operations.deliveries`); `last_status_code` is the receiver's last HTTP status (its
    body is never kept), `last_error` why the last attempt failed."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        # The sender's claim: rows still to send, by when they are due
        # (`models.operations.deliveries`).
        sa.Index(
            "ix_webhook_deliveries_due",
            "next_attempt_at",
            postgresql_where=sa.text("status IN ('pending', 'delivering')"),
        ),
        sa.Index("ix_webhook_deliveries_created", "created_at"),
    )
    id: int | None = Field(default=None, primary_key=True)
    key: uuid.UUID = Field(
        default_factory=uuid.uuid4,
        unique=True,
        sa_column_kwargs={"server_default": sa.text("gen_random_uuid()")},
    )
    subscription_id: int = Field(
        foreign_key="webhook_subscriptions.id", index=True, ondelete="CASCADE"
    )
    event: str = Field(max_length=40)
    run_id: int | None = Field(default=None, index=True)
    snapshot: dict[str, Any] = Field(sa_type=JSONB, nullable=False)
    status: str = Field(default="pending", max_length=20)
    attempts: int = 0
    created_at: datetime = created_field()
    updated_at: datetime = created_field()
    next_attempt_at: datetime = created_field()
    give_up_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)
    lease_expires_at: datetime | None = timestamp_field()
    delivered_at: datetime | None = timestamp_field()
    last_status_code: int | None = None
    last_error: str | None = None


class WebhookAttempt(SQLModel, table=True):
    """One attempt of a delivery: the HTTP status it got (None: no response), its error (None:
    2xx) and how long it took, ms. An attempt whose sender died (its lease expired) is logged
    as such by the claim that takes the delivery over, with no duration."""

    __tablename__ = "webhook_attempts"
    __table_args__ = (sa.UniqueConstraint("delivery_id", "attempt", name="webhook_attempts_once"),)
    id: int | None = Field(default=None, primary_key=True)
    delivery_id: int = Field(foreign_key="webhook_deliveries.id", index=True, ondelete="CASCADE")
    attempt: int
    started_at: datetime = Field(sa_type=sa.DateTime(timezone=True), nullable=False)
    duration_ms: float | None = None
    status_code: int | None = None
    error: str | None = None
