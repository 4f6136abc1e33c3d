"""The webhook sender's pass: `agentq.deliver_webhooks` (run by the sender process,
`scheduler.sender`) posts the outbox's due deliveries (`models.operations.deliveries`) and records
each attempt (issue 15).

Why a beat tick and not a task per event: the outbox row is the message. A state change writes
its delivery in its own transaction and sends nothing to the broker, so a lost broker message
cannot lose a notification, and a retry due in hours waits as a row (`next_attempt_at`), not in
the broker (DESIGN.md, invariant 10). One pass takes the half-open circuits it will probe and
claims at most `DELIVERIES_PER_PASS` rows in one short transaction, then posts with no
transaction open (invariant 11): each receiver's deliveries in order on one connection, from
`SENDERS` threads, so a receiver that hangs holds one thread for `AGENTQ_WEBHOOK_TIMEOUT_S` and
the others go on. A receiver's failure gives its other claimed deliveries of the pass back
unattempted (`models.operations.deliveries.release`) and counts toward its circuit breaker
(`models.operations.circuit_breakers`).

Each attempt resolves the receiver's name once, refuses an address that is not public (unless
`AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS`), and connects to that address with the name in the Host
header and as the TLS server name (`models.operations.destinations`); proxies from the environment
are not used (a proxy would resolve the name again). The receiver's answer is its status code: its
body is neither read nor kept.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import httpx
import structlog

from models.db import session_scope
from models.errors import InvalidInput
from models.operations import circuit_breakers, deliveries, destinations, webhooks
from models.operations.deliveries import Claimed, Response
from models.settings import Settings, get_settings
from models.tables import utcnow

log = structlog.get_logger("agentq.webhooks")
DELIVERIES_PER_PASS = 20  # claimed by one beat tick at most; the rest wait for the next tick
SENDERS = 8  # receivers posted to at once in one pass


def deliver_due(*, now: datetime | None = None) -> dict[str, int]:
    """Claim the deliveries due at `now` (default: the clock), post each, record its attempt;
    returns counts by the status each ended in ("delivered", "pending", "failed", "lost" for
    one whose lease another sender took over meanwhile, "released" for one given back
    unattempted after its receiver failed in this pass)."""
    settings = get_settings()
    now = now or utcnow()
    with session_scope() as session:
        probing = circuit_breakers.take_probes(session, now=now, lease_s=settings.webhook_lease_s)
        claimed = deliveries.claim(
            session,
            now=now,
            lease_s=settings.webhook_lease_s,
            limit=DELIVERIES_PER_PASS,
            probing=probing,
        )
    if not claimed:
        return {}
    receivers: dict[int, list[Claimed]] = {}
    for delivery in claimed:
        receivers.setdefault(delivery.subscription_id, []).append(delivery)
    with ThreadPoolExecutor(max_workers=min(SENDERS, len(receivers))) as pool:
        ended = pool.map(lambda group: _deliver_in_order(group, settings), receivers.values())
        return dict(Counter(status for statuses in ended for status in statuses))


def client(settings: Settings) -> httpx.Client:
    """An HTTP client for one receiver's attempts: `AGENTQ_WEBHOOK_TIMEOUT_S`, no redirects
    followed, no proxy or other setting taken from the environment."""
    return httpx.Client(timeout=settings.webhook_timeout_s, follow_redirects=False, trust_env=False)


def _deliver_in_order(group: list[Claimed], settings: Settings) -> list[str]:
    """Post one subscription's claimed deliveries in order; after a failed attempt that reached
    for the receiver, give the rest back (they wait as the failed one does)."""
    ended: list[str] = []
    with client(settings) as http:
        for n, delivery in enumerate(group):
            status, response, next_at = _deliver(http, delivery, settings)
            ended.append(status)
            if response.contacted and not response.succeeded:
                return ended + _release(group[n + 1 :], next_at)
    return ended


def _deliver(
    http: httpx.Client, delivery: Claimed, settings: Settings
) -> tuple[str, Response, datetime]:
    response = post(http, delivery, settings)
    now = utcnow()
    status, next_at = deliveries.outcome(
        delivery, response, now=now, first_backoff_s=settings.webhook_first_backoff_s
    )
    with session_scope() as session:
        held = deliveries.record(
            session, delivery, response, status=status, next_at=next_at, now=now
        )
        if response.contacted:
            circuit_breakers.record(
                session,
                delivery.subscription_id,
                succeeded=response.succeeded,
                now=now,
                threshold=settings.webhook_breaker_failures,
                first_open_s=settings.webhook_breaker_open_s,
            )
    log.info(
        "webhook.attempt",
        delivery_id=delivery.id,
        subscription_id=delivery.subscription_id,
        webhook_event=delivery.event,
        attempt=delivery.attempt,
        status_code=response.status_code,
        error=response.error,
        duration_ms=round(response.duration_ms, 1),
        outcome=status if held else "lost",
    )
    return (status if held else "lost"), response, next_at


def _release(rest: list[Claimed], next_at: datetime) -> list[str]:
    if not rest:
        return []
    with session_scope() as session:
        for delivery in rest:
            deliveries.release(session, delivery, next_at=next_at, now=utcnow())
    return ["released"] * len(rest)


def post(http: httpx.Client, delivery: Claimed, settings: Settings) -> Response:
    """One signed POST of the delivery's body (`models.operations.deliveries.signed_headers`) to the
    address its URL's host resolves to now, pinned (`models.operations.destinations.resolve`); never
    raises: no secret, a refused or unresolvable destination, a timeout or a refused
    connection is a `Response` with no status (the first two with `contacted` False)."""
    started, clock = utcnow(), time.monotonic()
    secret = webhooks.signing_secret(delivery.secret, delivery.secret_ref, settings)
    if secret is None:
        error = f"secret {delivery.secret_ref!r} is not set (AGENTQ_WEBHOOK_SECRET(S))"
        return Response(None, error, started, 0.0, contacted=False)
    try:
        target = destinations.resolve(
            delivery.url, allow_private=settings.webhook_allow_private_networks
        )
    except InvalidInput as exc:
        elapsed_ms = (time.monotonic() - clock) * 1000
        return Response(None, f"refused: {exc}", started, elapsed_ms, contacted=False)
    body = delivery.body
    headers = deliveries.signed_headers(delivery, body, secret, timestamp=int(time.time()))
    headers["Host"] = target.host_header
    tls = {"sni_hostname": target.server_name} if target.tls else {}
    try:
        with http.stream(
            "POST", target.pinned_url, content=body.encode(), headers=headers, extensions=tls
        ) as answer:
            code = answer.status_code  # the body is not read: only the status is kept
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
        return Response(None, error, started, (time.monotonic() - clock) * 1000)
    duration_ms = (time.monotonic() - clock) * 1000
    return Response(code, None if 200 <= code < 300 else f"HTTP {code}", started, duration_ms)
