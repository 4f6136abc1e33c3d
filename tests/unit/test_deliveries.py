"""The webhook rules without services: back-off, what a response means, the signature, the
secrets' lookup and display (`models.deliveries`, `models.webhooks`)."""

from __future__ import annotations

import hashlib
import hmac
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from models import deliveries, webhooks
from models.deliveries import Claimed, Response
from models.errors import ConfigurationError
from models.settings import Settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def claimed(attempt: int, window_s: float = 3600) -> Claimed:
    give_up = NOW + timedelta(seconds=window_s)
    return Claimed(1, uuid.uuid4(), "run.finished", '{"a":1}', attempt, give_up, "http://x", "d")


def answer(code: int | None) -> Response:
    return Response(code, None if code == 200 else "no", NOW, 1.0)


def test_backoff_doubles_from_the_first_wait_with_half_of_it_jittered() -> None:
    assert [deliveries.backoff_s(n, 10, rng=lambda: 1.0) for n in (1, 2, 3)] == [10, 20, 40]
    assert [deliveries.backoff_s(n, 10, rng=lambda: 0.0) for n in (1, 2, 3)] == [5, 10, 20]
    assert deliveries.backoff_s(100, 10, rng=lambda: 1.0) == deliveries.MAX_BACKOFF_S


def test_a_2xx_delivers_and_anything_else_is_retried_within_the_window() -> None:
    rule = {"now": NOW, "first_backoff_s": 10, "rng": lambda: 1.0}
    assert deliveries.outcome(claimed(1), answer(204), **rule) == ("delivered", NOW)
    for code in (301, 404, 500, None):
        status, due = deliveries.outcome(claimed(2), answer(code), **rule)
        assert (status, due) == ("pending", NOW + timedelta(seconds=20))


def test_a_retry_that_would_fall_after_the_window_gives_up() -> None:
    rule = {"now": NOW, "first_backoff_s": 10, "rng": lambda: 1.0}
    assert deliveries.outcome(claimed(3, window_s=39), answer(500), **rule)[0] == "failed"
    assert deliveries.outcome(claimed(3, window_s=40), answer(500), **rule)[0] == "pending"


def test_the_signature_is_the_hmac_of_timestamp_dot_body_and_in_the_headers() -> None:
    delivery = claimed(1)
    expected = hmac.new(b"s3cret", b'1700000000.{"a":1}', hashlib.sha256).hexdigest()
    assert deliveries.signature("s3cret", 1_700_000_000, '{"a":1}') == f"sha256={expected}"
    headers = deliveries.signed_headers(delivery, "s3cret", timestamp=1_700_000_000)
    assert headers["X-Agentq-Signature"] == f"sha256={expected}"
    assert headers["Idempotency-Key"] == str(delivery.key)
    assert (headers["X-Agentq-Event"], headers["X-Agentq-Timestamp"]) == (
        "run.finished",
        "1700000000",
    )


def test_secrets_come_from_the_settings_and_are_never_shown_whole() -> None:
    settings = Settings(
        webhook_secret=SecretStr("short"),
        webhook_secrets={"ops": SecretStr("a-long-secret-ending-wxyz")},
    )
    assert webhooks.secret_for(settings, "default") == "short"
    assert webhooks.secret_for(settings, "ops") == "a-long-secret-ending-wxyz"
    assert webhooks.secret_for(settings, "other") is None
    assert webhooks.secret_shown(settings, "default") == "default (set)"
    assert webhooks.secret_shown(settings, "ops") == "ops (set, ends …wxyz)"
    assert webhooks.secret_shown(settings, "other") == "other (missing)"


def test_a_lease_no_longer_than_the_timeout_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="AGENTQ_WEBHOOK_LEASE_S"):
        Settings(webhook_timeout_s=10, webhook_lease_s=10)
