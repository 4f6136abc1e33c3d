"""Webhook deliveries from the outbox (issue 15): the sender's claim with a lease, the rule for
what an attempt's response means, the signed headers, and the delivery log.

A sender (`scheduler.webhooks`, in the webhook sender process) claims due rows `FOR UPDATE SKIP
LOCKED` with a lease (`AGENTQ_WEBHOOK_LEASE_S`) in one short transaction, posts them with none
open (DESIGN.md, invariant 11), then records each attempt in another. A sender that dies
mid-delivery leaves its lease to expire: the next claim takes the row over (logging the lost
attempt) and sends it again with the same `Idempotency-Key`, so delivery is at least once. The
record is fenced by the attempt number, so a late sender whose lease was taken over changes
nothing but its log line. Deliveries of a subscription whose circuit is open are not claimed,
and one of a half-open one only as its probe (`models.operations.circuit_breakers`).

The claim reads the run's goal and error from the run's row, and the body is built from them
and the delivery's snapshot at each attempt (`Claimed.body`): the outbox holds no user text, so
a forget that erases the run's content (`models.memory.erasures`) erases it from every delivery not
yet sent too.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from sqlmodel import Session, col, select

from models import sql
from models.engine import notifications
from models.operations import destinations
from models.operations.circuit_breakers import DUE
from models.operations.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookSubscription

MAX_BACKOFF_S: Final = 3600.0  # one wait between attempts at most, however many failed
LOST_ATTEMPT: Final = "lease expired: the sender stopped before it recorded a response"
ERROR_MAX_CHARS: Final = 500

# Due deliveries (`DUE`) of subscriptions whose circuit is closed, and one of each subscription
# this sender probes (:probing, `models.operations.circuit_breakers.take_probes`), locked past other
# senders' and leased to this one; an expired holder's attempt is logged as lost. A pending
# delivery whose window ended before a sender got to it (a retry due just before `give_up_at`,
# claimed a tick later) is failed instead: no attempt starts after the window. A lost attempt
# had started within it, so it is sent again even then (at least once). Each row comes with
# its subscription's URL and secret and its run's goal and error, as they are now.
CLAIM: Final = f"""
WITH expired AS (
    UPDATE webhook_deliveries SET status = 'failed', updated_at = :now
    WHERE status = 'pending' AND give_up_at < :now
), closed AS (
    SELECT d.id, d.status AS was, d.updated_at AS held_since
    FROM webhook_deliveries d JOIN webhook_subscriptions s ON s.id = d.subscription_id
    WHERE {DUE} AND s.circuit_open_until IS NULL
    ORDER BY d.next_attempt_at, d.id
    LIMIT :limit
    FOR UPDATE OF d SKIP LOCKED
), probes AS (
    SELECT p.id, p.was, p.held_since FROM unnest(CAST(:probing AS integer[])) AS sub(id)
    CROSS JOIN LATERAL (
        SELECT d.id, d.status AS was, d.updated_at AS held_since FROM webhook_deliveries d
        WHERE d.subscription_id = sub.id AND {DUE}
        ORDER BY d.next_attempt_at, d.id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    ) p
), due AS (
    SELECT id, was, held_since FROM closed UNION ALL SELECT id, was, held_since FROM probes
), claimed AS (
    UPDATE webhook_deliveries d
    SET status = 'delivering', attempts = d.attempts + 1, lease_expires_at = :lease_until,
        updated_at = :now
    FROM due WHERE d.id = due.id
    RETURNING d.id, d.key, d.event, d.snapshot, d.attempts, d.give_up_at, d.subscription_id,
        d.run_id, due.was, due.held_since
), lost AS (
    INSERT INTO webhook_attempts (delivery_id, attempt, started_at, error)
    SELECT id, attempts - 1, held_since, :lost FROM claimed WHERE was = 'delivering'
    ON CONFLICT (delivery_id, attempt) DO NOTHING
)
SELECT c.id, c.key, c.event, c.snapshot, c.attempts, c.give_up_at, c.subscription_id, s.url,
    s.secret, s.secret_ref, r.goal, r.error
FROM claimed c JOIN webhook_subscriptions s ON s.id = c.subscription_id
LEFT JOIN runs r ON r.id = c.run_id
ORDER BY c.id
"""

# One attempt's log line; a lost attempt's line (written by the claim that took it over) is
# replaced by the late sender's real outcome.
LOG_ATTEMPT: Final = """
INSERT INTO webhook_attempts (delivery_id, attempt, started_at, duration_ms, status_code, error)
VALUES (:id, :attempt, :started_at, :duration_ms, :status_code, :error)
ON CONFLICT (delivery_id, attempt) DO UPDATE
SET duration_ms = EXCLUDED.duration_ms, status_code = EXCLUDED.status_code,
    error = EXCLUDED.error
"""

# The attempt's outcome on the delivery, if this attempt still holds it.
FINISH: Final = """
UPDATE webhook_deliveries
SET status = :status, next_attempt_at = :next_at, lease_expires_at = NULL, updated_at = :now,
    delivered_at = :delivered_at, last_status_code = :status_code, last_error = :error
WHERE id = :id AND status = 'delivering' AND attempts = :attempt
RETURNING id
"""


# A claimed delivery not attempted (its receiver failed just before, in the same pass): back
# to pending, due when the failed one is retried (within its window), its claim not counted.
RELEASE: Final = """
UPDATE webhook_deliveries
SET status = 'pending', attempts = attempts - 1, lease_expires_at = NULL, updated_at = :now,
    next_attempt_at = least(CAST(:next_at AS timestamptz), give_up_at)
WHERE id = :id AND status = 'delivering' AND attempts = :attempt
RETURNING id
"""


@dataclass(frozen=True)
class Claimed:
    """A delivery leased to this sender, as its `attempt`-th attempt: what to post (`body`)
    where, signed with `secret` (or, for a subscription older than its own secret, the shared
    one `secret_ref` names); `goal` and `error` are its run's, as the run's row holds them."""

    id: int
    key: uuid.UUID
    event: str
    snapshot: dict[str, Any]
    attempt: int
    give_up_at: datetime
    subscription_id: int
    url: str
    secret: str | None = None
    secret_ref: str | None = None
    goal: str | None = None
    error: str | None = None

    @property
    def body(self) -> str:
        """The JSON this attempt sends and signs (`models.engine.notifications.body`)."""
        return notifications.body(self.snapshot, goal=self.goal, error=self.error)


@dataclass(frozen=True)
class Response:
    """What one attempt got: the HTTP status (None: no response), the error (None: 2xx), and
    whether it reached for the network (False: refused before connecting, which says nothing
    of the receiver to its circuit breaker)."""

    status_code: int | None
    error: str | None
    started_at: datetime
    duration_ms: float
    contacted: bool = True

    @property
    def succeeded(self) -> bool:
        """A 2xx."""
        return self.status_code is not None and 200 <= self.status_code < 300


def claim(
    session: Session,
    *,
    now: datetime,
    lease_s: float,
    limit: int,
    probing: list[int] | None = None,
) -> list[Claimed]:
    """Up to `limit` due deliveries of subscriptions whose circuit is closed, plus one of each
    subscription in `probing`, leased to the caller until `now + lease_s`, oldest due first;
    rows another sender holds are skipped, not waited for."""
    params = {
        "now": now,
        "lease_until": now + timedelta(seconds=lease_s),
        "limit": limit,
        "lost": LOST_ATTEMPT,
        "probing": list(probing or []),
    }
    rows = sql.execute(session, CLAIM, params).fetchall()
    return [
        Claimed(
            r.id,
            r.key,
            r.event,
            r.snapshot,
            r.attempts,
            r.give_up_at,
            r.subscription_id,
            r.url,
            r.secret,
            r.secret_ref,
            r.goal,
            r.error,
        )
        for r in rows
    ]


def backoff_s(attempt: int, first_s: float, rng: Callable[[], float] = random.random) -> float:
    """The wait after failed attempt `attempt` (1, 2, ...): `first_s * 2**(attempt - 1)`,
    capped at `MAX_BACKOFF_S`, then "equal jitter": half of it plus a random part of the other
    half, so senders that failed together do not retry together (M. Brooker, "Exponential
    Backoff And Jitter", AWS Architecture Blog, 2015)."""
    ceiling = min(MAX_BACKOFF_S, first_s * 2.0 ** min(attempt - 1, 64))
    return ceiling / 2 + rng() * ceiling / 2


def outcome(
    delivery: Claimed,
    response: Response,
    *,
    now: datetime,
    first_backoff_s: float,
    rng: Callable[[], float] = random.random,
) -> tuple[str, datetime]:
    """The delivery's status after `response` and when it is due next: ("delivered", now) for
    a 2xx; else ("pending", now + `backoff_s`), or ("failed", that time) when it falls after
    the delivery's `give_up_at` (the end of its retry window): it is not tried again."""
    if response.succeeded:
        return "delivered", now
    due = now + timedelta(seconds=backoff_s(delivery.attempt, first_backoff_s, rng))
    return ("failed" if due > delivery.give_up_at else "pending"), due


def record(
    session: Session,
    delivery: Claimed,
    response: Response,
    *,
    status: str,
    next_at: datetime,
    now: datetime,
) -> bool:
    """Log the attempt and, if it still holds the delivery, move the delivery to `status`
    (due at `next_at`); returns whether it did (False: its lease expired and another sender
    took the delivery over, which decides it)."""
    error = None if response.error is None else response.error[:ERROR_MAX_CHARS]
    values = {
        "id": delivery.id,
        "attempt": delivery.attempt,
        "status_code": response.status_code,
        "error": error,
    }
    log = {**values, "started_at": response.started_at, "duration_ms": response.duration_ms}
    sql.execute(session, LOG_ATTEMPT, log)
    delivered_at = now if status == "delivered" else None
    finish = {**values, "status": status, "next_at": next_at, "now": now}
    return sql.one(session, FINISH, {**finish, "delivered_at": delivered_at}) is not None


def release(session: Session, delivery: Claimed, *, next_at: datetime, now: datetime) -> bool:
    """Give back a claimed delivery this sender did not attempt (its receiver failed in the
    same pass): pending again, due at `next_at` (at the latest its `give_up_at`), its claim not
    counted; returns False when its lease was taken over meanwhile (nothing changes)."""
    params = {"id": delivery.id, "attempt": delivery.attempt, "next_at": next_at, "now": now}
    return sql.one(session, RELEASE, params) is not None


def signature(secret: str, timestamp: int, body: str) -> str:
    """`sha256=` and the hex HMAC-SHA256, keyed with `secret`, of `"<timestamp>.<body>"`: the
    timestamp is signed too, so a receiver that refuses old timestamps refuses a replayed
    request (the scheme of Stripe's `Stripe-Signature`; RFC 2104 for HMAC)."""
    signed = f"{timestamp}.{body}".encode()
    return "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def signed_headers(delivery: Claimed, body: str, secret: str, *, timestamp: int) -> dict[str, str]:
    """The headers of one attempt posting `body`: `Idempotency-Key` (the delivery's key, the
    same at every attempt), `X-Agentq-Event`, `X-Agentq-Timestamp` (Unix seconds) and
    `X-Agentq-Signature` (of `body`)."""
    return {
        "Content-Type": "application/json",
        "Idempotency-Key": str(delivery.key),
        "X-Agentq-Event": delivery.event,
        "X-Agentq-Timestamp": str(timestamp),
        "X-Agentq-Signature": signature(secret, timestamp, body),
    }


@dataclass(frozen=True)
class LoggedDelivery:
    """A delivery as the console and CLI list it, with its subscription's URL as shown
    (`models.operations.destinations.shown`: no userinfo, no query string)."""

    delivery: WebhookDelivery
    shown_url: str


def recent(session: Session, *, limit: int, status: str | None = None) -> list[LoggedDelivery]:
    """The newest `limit` deliveries (in `status` when given), newest first."""
    # for the console's webhooks page and `agentq webhook deliveries`
    stmt = (
        select(WebhookDelivery, WebhookSubscription.url)
        .join(WebhookSubscription, col(WebhookSubscription.id) == WebhookDelivery.subscription_id)
        .order_by(col(WebhookDelivery.id).desc())
        .limit(limit)
    )
    if status is not None:
        stmt = stmt.where(col(WebhookDelivery.status) == status)
    return [LoggedDelivery(d, destinations.shown(url)) for d, url in session.exec(stmt)]


def attempts_of(session: Session, delivery_id: int) -> list[WebhookAttempt]:
    """The delivery's attempts, first first."""
    # for the console's webhooks page and the tests of the delivery log
    stmt = select(WebhookAttempt).where(WebhookAttempt.delivery_id == delivery_id)
    return list(session.exec(stmt.order_by(col(WebhookAttempt.attempt))))
