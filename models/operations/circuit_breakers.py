"""A circuit breaker per webhook subscription: a receiver that keeps failing stops being tried
for a while, so it costs the sender one attempt per window instead of one per delivery.

The state is two columns of `webhook_subscriptions` (Postgres holds it, so every sender process
sees the same): `failures`, its consecutive failed attempts, and `circuit_open_until`. Closed
(NULL): its deliveries are claimed as they fall due. After `AGENTQ_WEBHOOK_BREAKER_FAILURES`
consecutive failures it opens: nothing of it is claimed until the window ends
(`AGENTQ_WEBHOOK_BREAKER_OPEN_S`, doubled at each failure since, at most an hour: `open_s`).
Then it is half-open: one sender takes one delivery as a probe (`TAKE_PROBES` moves the time
to the probe's lease, so no other sender probes too); a 2xx closes it, a failure opens it again
for twice as long. (M. Nygard, "Release It!", 2nd ed., 2018, ch. 5, "Circuit Breaker".)

Only attempts that reached for the network count: a refused destination or a missing secret
fails the delivery but says nothing of the receiver. Deliveries still wait their own back-off
and give up at the end of their retry window, open circuit or not.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Final

from sqlmodel import Session

from models import sql

MAX_OPEN_S: Final = 3600.0  # one open window at most, however many probes failed

# A delivery the sender may claim now: pending and due within its retry window, or held
# under an expired lease (shared by the claim in `models.operations.deliveries`).
DUE: Final = """(
    (d.status = 'pending' AND d.next_attempt_at <= :now AND d.give_up_at >= :now)
    OR (d.status = 'delivering' AND d.lease_expires_at <= :now))"""

# The half-open subscriptions with a due delivery, taken by this sender to probe: their open
# time moves to the probe's lease end, so another sender, which re-reads the row once this
# transaction ends, sees it open and probes nothing (a probe whose sender dies frees it then).
TAKE_PROBES: Final = f"""
UPDATE webhook_subscriptions s SET circuit_open_until = :lease_until
WHERE s.circuit_open_until <= :now
    AND EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.subscription_id = s.id AND {DUE})
RETURNING s.id
"""

# A 2xx: the receiver answers again; its circuit closes and its failures count from zero.
SUCCEEDED: Final = """
UPDATE webhook_subscriptions SET failures = 0, circuit_open_until = NULL WHERE id = :id
"""

# A failed attempt: one more consecutive failure; from the threshold on, the circuit opens
# until :open_until (`open_s` of the new count); below it, the circuit stays as it is.
FAILED: Final = """
UPDATE webhook_subscriptions
SET failures = failures + 1,
    circuit_open_until = CASE WHEN failures + 1 >= :threshold
        THEN CAST(:now AS timestamptz) + make_interval(secs => least(:max_s,
            :open_s * power(2, failures + 1 - :threshold)))
        ELSE circuit_open_until END
WHERE id = :id
RETURNING failures, circuit_open_until
"""


def open_s(failures: int, *, threshold: int, first_open_s: float) -> float | None:
    """How long a circuit with `failures` consecutive failures stays open, s: None below
    `threshold` (closed), `first_open_s` at it, doubled at each failure past it (each a failed
    probe), at most `MAX_OPEN_S`. The rule `FAILED` applies in SQL."""
    if failures < threshold:
        return None
    return min(MAX_OPEN_S, first_open_s * 2.0 ** min(failures - threshold, 64))


def take_probes(session: Session, *, now: datetime, lease_s: float) -> list[int]:
    """The ids of the half-open subscriptions with a due delivery, now this sender's to probe
    (one delivery each) until `now + lease_s`."""
    params = {"now": now, "lease_until": now + timedelta(seconds=lease_s)}
    return [int(row.id) for row in sql.execute(session, TAKE_PROBES, params).fetchall()]


def record(
    session: Session,
    subscription_id: int,
    *,
    succeeded: bool,
    now: datetime,
    threshold: int,
    first_open_s: float,
) -> datetime | None:
    """Count one attempt to the subscription: a success closes its circuit, a failure adds to
    its failures and opens the circuit from `threshold` on. Returns when it is open until
    (None: closed)."""
    if succeeded:
        sql.execute(session, SUCCEEDED, {"id": subscription_id})
        return None
    params = {
        "id": subscription_id,
        "now": now,
        "threshold": threshold,
        "open_s": first_open_s,
        "max_s": MAX_OPEN_S,
    }
    row = sql.one(session, FAILED, params)
    return None if row is None else row.circuit_open_until


def state(open_until: datetime | None, failures: int, *, now: datetime) -> str:
    """How a listing shows a circuit: "closed", "closed (2 failures)", "open until <time>"
    or "half-open" (its window has ended: the next due delivery is a probe)."""
    if open_until is None:
        return "closed" if failures == 0 else f"closed ({failures} failed in a row)"
    if open_until > now:
        return f"open until {open_until:%Y-%m-%d %H:%M:%S} ({failures} failed in a row)"
    return f"half-open ({failures} failed in a row)"
