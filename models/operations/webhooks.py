"""Webhook subscriptions (issue 15): who is told of which events, and with which secret.

Managed by `agentq webhook add/list/rotate/remove`, through `models.front.commands`. Every
subscription signs with a secret of its own (`new_secret`: 256 random bits), generated when it
is added or rotated and shown then only: with one secret shared by many subscriptions, every
receiver got the same signature for the same body and could replay what it received to the
others. The secret is stored in the row, as it must be to sign; whoever reads the database can
read it, as they can everything agentq stores (README, "Security model"). A subscription made
before secrets were per subscription keeps signing with the shared secret of the settings that
its `secret_ref` names (`legacy_secret`), so its receiver keeps working, until `rotate_secret`
gives it one of its own; listings flag it.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final
from urllib.parse import urlsplit

from sqlmodel import Session, col, select

from models.engine.notifications import EVENTS
from models.errors import InvalidInput, NotFound
from models.operations import circuit_breakers, destinations
from models.operations.webhook_tables import WebhookSubscription
from models.settings import Settings

DEFAULT_SECRET: Final = "default"  # the secret ref of AGENTQ_WEBHOOK_SECRET (legacy rows)
SECRET_PREFIX: Final = "whsec_"  # so a secret in a config file says what it is
SECRET_BYTES: Final = 32  # 256 bits, the HMAC-SHA256 key size (RFC 2104, section 3)
SHOWN_TAIL_CHARS: Final = 4  # of a secret of at least SHOWN_TAIL_MIN_CHARS, to tell two apart
SHOWN_TAIL_MIN_CHARS: Final = 16
URL_MAX_CHARS: Final = 2000


def new_secret() -> str:
    """A fresh signing secret: `whsec_` and 43 URL-safe characters (256 random bits)."""
    return SECRET_PREFIX + secrets.token_urlsafe(SECRET_BYTES)


def legacy_secret(settings: Settings, ref: str) -> str | None:
    """The shared secret `ref` names, for a subscription older than its own secret:
    `AGENTQ_WEBHOOK_SECRET` for "default", else the key `ref` of `AGENTQ_WEBHOOK_SECRETS`;
    None when it is not set."""
    if ref == DEFAULT_SECRET and settings.webhook_secret is not None:
        return settings.webhook_secret.get_secret_value()
    named = settings.webhook_secrets.get(ref)
    return None if named is None else named.get_secret_value()


def signing_secret(secret: str | None, secret_ref: str | None, settings: Settings) -> str | None:
    """The secret that signs for a subscription: its own, else the shared one its
    `secret_ref` names (`legacy_secret`); None when neither is set."""
    if secret is not None:
        return secret
    return None if secret_ref is None else legacy_secret(settings, secret_ref)


def secret_shown(row: WebhookSubscription, settings: Settings) -> str:
    """How a listing shows a subscription's secret, never whole: "own (ends …wxyz)", or for
    one older than its own secret "shared <ref> (set|missing): rotate it"."""
    if row.secret is not None:
        return f"own (ends …{row.secret[-SHOWN_TAIL_CHARS:]})"
    ref = row.secret_ref or DEFAULT_SECRET
    shared = legacy_secret(settings, ref)
    state = "missing" if shared is None else "set"
    if shared is not None and len(shared) >= SHOWN_TAIL_MIN_CHARS:
        state = f"set, ends …{shared[-SHOWN_TAIL_CHARS:]}"
    return f"shared {ref} ({state}): rotate it"


def add_subscription(
    session: Session, *, url: str, events: Sequence[str], user_id: str | None
) -> WebhookSubscription:
    """A new enabled subscription of `url` to `events` of `user_id`'s runs (None: every
    user's), with a secret of its own (`new_secret`; the row holds it: show it once). Raises
    `InvalidInput` naming the field: a URL that is not http(s) with a host, no event or one
    not in `EVENTS`, an empty user. Where the URL points is checked by the caller, before the
    transaction (`models.operations.destinations.resolve`: a network call)."""
    check_url(url)
    wanted = list(dict.fromkeys(events))
    unknown = [e for e in wanted if e not in EVENTS]
    if not wanted or unknown:
        found = f"{', '.join(unknown)} is not an event" if unknown else "no event given"
        raise InvalidInput(f"events: {found}; use one or more of {', '.join(EVENTS)}")
    if user_id is not None and not user_id.strip():
        raise InvalidInput("user: empty; give a user id, or none for every user's runs")
    row = WebhookSubscription(url=url, events=wanted, user_id=user_id, secret=new_secret())
    session.add(row)
    session.flush()
    return row


def check_url(url: str) -> None:
    """Raise `InvalidInput` for a URL that is not http(s) with a host, or is too long."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > URL_MAX_CHARS:
        raise InvalidInput(
            f"url: {destinations.shown(url)[:100]!r} is not a webhook URL; give http:// or "
            f"https:// with a host, at most {URL_MAX_CHARS} characters"
        )


def rotate_secret(session: Session, subscription_id: int) -> WebhookSubscription:
    """Give subscription `subscription_id` a new secret of its own (an older subscription
    stops using the shared one); the row, holding it: show it once. Every attempt from the
    commit on signs with it, retries of earlier deliveries too. Raises `NotFound`."""
    row = _get(session, subscription_id, lock=True)
    row.secret, row.secret_ref = new_secret(), None
    session.add(row)
    session.flush()
    return row


def list_subscriptions(session: Session) -> list[WebhookSubscription]:
    """Every subscription, oldest first."""
    # for `listed`, and the tests
    return list(session.exec(select(WebhookSubscription).order_by(col(WebhookSubscription.id))))


@dataclass(frozen=True)
class Listed:
    """A subscription as the CLI and the console show it: its URL without userinfo or query
    string (`models.operations.destinations.shown`), its secret never whole (`secret_shown`), and
    its circuit breaker's state (`models.operations.circuit_breakers.state`)."""

    id: int
    shown_url: str
    events: list[str]
    user_id: str | None
    secret: str
    circuit: str
    enabled: bool
    created_at: datetime


def listed(session: Session, *, settings: Settings, now: datetime) -> list[Listed]:
    """Every subscription as shown, oldest first."""
    return [
        Listed(
            id=row.id or 0,
            shown_url=destinations.shown(row.url),
            events=list(row.events),
            user_id=row.user_id,
            secret=secret_shown(row, settings),
            circuit=circuit_breakers.state(row.circuit_open_until, row.failures, now=now),
            enabled=row.enabled,
            created_at=row.created_at,
        )
        for row in list_subscriptions(session)
    ]


def remove_subscription(session: Session, subscription_id: int) -> WebhookSubscription:
    """Delete subscription `subscription_id`, its deliveries and their log with it (cascade);
    the row as it was. Raises `NotFound`."""
    row = _get(session, subscription_id)
    session.delete(row)
    session.flush()
    return row


def _get(session: Session, subscription_id: int, *, lock: bool = False) -> WebhookSubscription:
    row = session.get(WebhookSubscription, subscription_id, with_for_update=lock)
    if row is None:
        raise NotFound(f"webhook {subscription_id} does not exist")
    return row
