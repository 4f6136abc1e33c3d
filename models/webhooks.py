"""Webhook subscriptions (issue 15): who is told of which events, and with which secret.

Managed by `agentq webhook add/list/remove` and the admin API, through `models.commands`. A
subscription's secret stays in the settings: the row holds its name (`secret_ref`), so neither a
database dump nor a listing shows it; `secret_shown` says only whether it is set and its last
characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import urlsplit

from sqlmodel import Session, col, select

from models.errors import InvalidInput, NotFound
from models.notifications import EVENTS
from models.settings import Settings
from models.webhook_tables import WebhookSubscription

DEFAULT_SECRET: Final = "default"  # the secret ref of AGENTQ_WEBHOOK_SECRET
SECRET_REF_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
SHOWN_TAIL_CHARS: Final = 4  # of a secret of at least SHOWN_TAIL_MIN_CHARS, to tell two apart
SHOWN_TAIL_MIN_CHARS: Final = 16
URL_MAX_CHARS: Final = 2000


def secret_for(settings: Settings, ref: str) -> str | None:
    """The shared secret `ref` names: `AGENTQ_WEBHOOK_SECRET` for "default", else the key `ref`
    of `AGENTQ_WEBHOOK_SECRETS`; None when it is not set."""
    if ref == DEFAULT_SECRET and settings.webhook_secret is not None:
        return settings.webhook_secret.get_secret_value()
    named = settings.webhook_secrets.get(ref)
    return None if named is None else named.get_secret_value()


def secret_shown(settings: Settings, ref: str) -> str:
    """How a listing shows the secret `ref`: its name and "missing", "set", or "set, ends
    …wxyz" (the last `SHOWN_TAIL_CHARS` of a long one). Never the whole secret."""
    secret = secret_for(settings, ref)
    if secret is None:
        return f"{ref} (missing)"
    if len(secret) < SHOWN_TAIL_MIN_CHARS:
        return f"{ref} (set)"
    return f"{ref} (set, ends …{secret[-SHOWN_TAIL_CHARS:]})"


def add_subscription(
    session: Session,
    *,
    url: str,
    events: Sequence[str],
    user_id: str | None,
    secret_ref: str,
    settings: Settings,
) -> WebhookSubscription:
    """A new enabled subscription of `url` to `events` of `user_id`'s runs (None: every
    user's), signed with the secret `secret_ref` names. Raises `InvalidInput` naming the field:
    a URL that is not http(s) with a host, no event or one not in `EVENTS`, a secret ref that
    is malformed or not set in this process's settings."""
    _check_url(url)
    wanted = list(dict.fromkeys(events))
    unknown = [e for e in wanted if e not in EVENTS]
    if not wanted or unknown:
        found = f"{', '.join(unknown)} is not an event" if unknown else "no event given"
        raise InvalidInput(f"events: {found}; use one or more of {', '.join(EVENTS)}")
    if user_id is not None and not user_id.strip():
        raise InvalidInput("user: empty; give a user id, or none for every user's runs")
    _check_secret_ref(secret_ref, settings)
    row = WebhookSubscription(url=url, events=wanted, user_id=user_id, secret_ref=secret_ref)
    session.add(row)
    session.flush()
    return row


def _check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or len(url) > URL_MAX_CHARS:
        raise InvalidInput(
            f"url: {url[:100]!r} is not a webhook URL; give http:// or https:// with a host, "
            f"at most {URL_MAX_CHARS} characters"
        )


def _check_secret_ref(ref: str, settings: Settings) -> None:
    if not re.fullmatch(SECRET_REF_PATTERN, ref):
        raise InvalidInput(
            f"secret: {ref!r} is not a secret name: 1 to 100 letters, digits and . _ -"
        )
    if secret_for(settings, ref) is None:
        where = (
            "set AGENTQ_WEBHOOK_SECRET"
            if ref == DEFAULT_SECRET
            else f'add "{ref}" to AGENTQ_WEBHOOK_SECRETS (JSON: {{"{ref}": "..."}})'
        )
        raise InvalidInput(f"secret: {ref!r} is not set; {where} first, for every process")


def list_subscriptions(session: Session) -> list[WebhookSubscription]:
    """Every subscription, oldest first."""
    # for `agentq webhook list` and GET /api/v1/webhooks
    return list(session.exec(select(WebhookSubscription).order_by(col(WebhookSubscription.id))))


def remove_subscription(session: Session, subscription_id: int) -> WebhookSubscription:
    """Delete subscription `subscription_id`, its deliveries and their log with it (cascade);
    the row as it was. Raises `NotFound`."""
    row = session.get(WebhookSubscription, subscription_id)
    if row is None:
        raise NotFound(f"webhook {subscription_id} does not exist")
    session.delete(row)
    session.flush()
    return row
