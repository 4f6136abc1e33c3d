"""The webhook sender: the beat's `agentq.deliver_webhooks` posts the outbox's due deliveries
(`models.deliveries`) and records each attempt (issue 15).

Why the beat and not a task per event: the outbox row is the message. A state change writes its
delivery in its own transaction and sends nothing to the broker, so a lost broker message
cannot lose a notification, and a retry due in hours waits as a row (`next_attempt_at`), not in
the broker (DESIGN.md, invariant 10). One pass claims at most `DELIVERIES_PER_PASS` rows in a
short transaction, posts them from `SENDERS` threads with no transaction open (invariant 11),
and records each as soon as it is answered, so a pass takes about one response time, at most
`AGENTQ_WEBHOOK_TIMEOUT_S`, and several scheduler processes share the work (`SKIP LOCKED`).
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import structlog

from models import deliveries, webhooks
from models.db import session_scope
from models.deliveries import Claimed, Response
from models.settings import Settings, get_settings
from models.tables import utcnow

log = structlog.get_logger("agentq.webhooks")
DELIVERIES_PER_PASS = 20  # claimed by one beat tick at most; the rest wait for the next tick
SENDERS = 8  # threads posting at once in one pass
BODY_QUOTED_CHARS = 200  # of a refusing receiver's response, kept as the attempt's error


def deliver_due(*, now: datetime | None = None) -> dict[str, int]:
    """Claim the deliveries due at `now` (default: the clock), post each, record its attempt;
    returns counts by the status each ended in ("delivered", "pending", "failed", and "lost"
    for one whose lease another sender took over meanwhile)."""
    settings = get_settings()
    with session_scope() as session:
        claimed = deliveries.claim(
            session,
            now=now or utcnow(),
            lease_s=settings.webhook_lease_s,
            limit=DELIVERIES_PER_PASS,
        )
    if not claimed:
        return {}
    with (
        httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False) as client,
        ThreadPoolExecutor(max_workers=min(SENDERS, len(claimed))) as pool,
    ):
        ended = list(pool.map(lambda d: _deliver(client, d, settings), claimed))
    return dict(Counter(ended))


def _deliver(client: httpx.Client, delivery: Claimed, settings: Settings) -> str:
    response = post(client, delivery, webhooks.secret_for(settings, delivery.secret_ref))
    now = utcnow()
    status, next_at = deliveries.outcome(
        delivery, response, now=now, first_backoff_s=settings.webhook_first_backoff_s
    )
    with session_scope() as session:
        held = deliveries.record(
            session, delivery, response, status=status, next_at=next_at, now=now
        )
    log.info(
        "webhook.attempt",
        delivery_id=delivery.id,
        webhook_event=delivery.event,
        attempt=delivery.attempt,
        status_code=response.status_code,
        error=response.error,
        duration_ms=round(response.duration_ms, 1),
        outcome=status if held else "lost",
    )
    return status if held else "lost"


def post(client: httpx.Client, delivery: Claimed, secret: str | None) -> Response:
    """One signed POST of the delivery's body (`models.deliveries.signed_headers`); never
    raises: no secret, a timeout or a refused connection is a `Response` with no status."""
    started, clock = utcnow(), time.monotonic()
    if secret is None:
        error = f"secret {delivery.secret_ref!r} is not set (AGENTQ_WEBHOOK_SECRET(S))"
        return Response(None, error, started, 0.0)
    headers = deliveries.signed_headers(delivery, secret, timestamp=int(time.time()))
    try:
        answer = client.post(delivery.url, content=delivery.body.encode(), headers=headers)
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
        return Response(None, error, started, (time.monotonic() - clock) * 1000)
    refused = f"HTTP {answer.status_code}: {answer.text[:BODY_QUOTED_CHARS]}"
    duration_ms = (time.monotonic() - clock) * 1000
    return Response(
        answer.status_code, None if answer.is_success else refused, started, duration_ms
    )
