"""The webhook rules without services: back-off, what a response means, the signature, the
secrets' lookup and display, the body built from a snapshot, the circuit breaker's window
(`models.operations.deliveries`, `models.operations.webhooks`, `models.engine.notifications`,
`models.operations.circuit_breakers`)."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from pydantic import SecretStr

from models.engine import notifications
from models.errors import ConfigurationError
from models.operations import circuit_breakers, deliveries, webhooks
from models.operations.deliveries import Claimed, Response
from models.operations.webhook_tables import WebhookSubscription
from models.settings import Settings

NOW = datetime(2026, 1, 1, tzinfo=UTC)


SNAPSHOT = {
    "event": "run.finished",
    "occurred_at": NOW.isoformat(),
    "run": {"id": 7, "user_id": "ann", "status": "failed", "finished_at": NOW.isoformat()},
    "escalation": None,
}


def claimed(attempt: int, window_s: float = 3600) -> Claimed:
    give_up = NOW + timedelta(seconds=window_s)
    return Claimed(1, uuid.uuid4(), "run.finished", SNAPSHOT, attempt, give_up, 3, "http://x")


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
    headers = deliveries.signed_headers(delivery, '{"a":1}', "s3cret", timestamp=1_700_000_000)
    assert headers["X-Agentq-Signature"] == f"sha256={expected}"
    assert headers["Idempotency-Key"] == str(delivery.key)
    assert (headers["X-Agentq-Event"], headers["X-Agentq-Timestamp"]) == (
        "run.finished",
        "1700000000",
    )


def test_every_subscription_gets_its_own_secret_shown_only_by_its_end() -> None:
    made = {webhooks.new_secret() for _ in range(100)}
    assert len(made) == 100 and all(s.startswith("whsec_") and len(s) == 49 for s in made)
    own = WebhookSubscription(url="https://x", events=["run.finished"], secret="whsec_abcdwxyz")
    assert webhooks.secret_shown(own, Settings()) == "own (ends …wxyz)"
    assert webhooks.signing_secret(own.secret, None, Settings()) == "whsec_abcdwxyz"


def test_a_subscription_older_than_its_own_secret_signs_with_the_shared_one() -> None:
    settings = Settings(
        webhook_secret=SecretStr("short"),
        webhook_secrets={"ops": SecretStr("a-long-secret-ending-wxyz")},
    )
    assert webhooks.signing_secret(None, "default", settings) == "short"
    assert webhooks.signing_secret(None, "ops", settings) == "a-long-secret-ending-wxyz"
    assert webhooks.signing_secret(None, "other", settings) is None
    shown = {
        ref: webhooks.secret_shown(
            WebhookSubscription(url="https://x", events=[], secret_ref=ref), settings
        )
        for ref in ("default", "ops", "other")
    }
    assert shown == {
        "default": "shared default (set): rotate it",
        "ops": "shared ops (set, ends …wxyz): rotate it",
        "other": "shared other (missing): rotate it",
    }


def test_the_body_quotes_the_goal_and_error_the_run_holds_when_it_is_sent() -> None:
    delivery = claimed(1)
    assert "goal" not in json.dumps(delivery.snapshot)  # the outbox keeps no user text
    sent = Claimed(**{**delivery.__dict__, "goal": "g" * 600, "error": "boom"})
    body = json.loads(sent.body)
    assert list(body) == ["event", "occurred_at", "run", "escalation"]
    assert list(body["run"]) == ["id", "user_id", "status", "goal", "error", "finished_at"]
    assert body["run"]["goal"] == "g" * notifications.GOAL_MAX_CHARS
    assert (body["run"]["error"], body["run"]["status"]) == ("boom", "failed")
    erased = Claimed(**{**delivery.__dict__, "goal": "[erased]", "error": "[erased]"})
    assert json.loads(erased.body)["run"]["goal"] == "[erased]"
    escalation = {"status": "open", "id": 4, "deadline_at": None, "step_id": 2, "reason": "x"}
    snapshot = {**SNAPSHOT, "escalation": escalation}  # as jsonb orders it
    keys = list(json.loads(notifications.body(snapshot, goal="g", error=None))["escalation"])
    assert keys == ["id", "reason", "step_id", "status", "deadline_at"]


def test_a_circuit_opens_at_the_threshold_and_doubles_each_failed_probe() -> None:
    rule = {"threshold": 3, "first_open_s": 60.0}
    windows = [circuit_breakers.open_s(n, **rule) for n in range(1, 7)]
    assert windows == [None, None, 60.0, 120.0, 240.0, 480.0]
    assert circuit_breakers.open_s(40, **rule) == circuit_breakers.MAX_OPEN_S
    later = NOW + timedelta(seconds=30)
    assert circuit_breakers.state(None, 0, now=NOW) == "closed"
    assert circuit_breakers.state(None, 2, now=NOW) == "closed (2 failed in a row)"
    assert circuit_breakers.state(later, 3, now=NOW).startswith("open until 2026-01-01 00:00:30")
    assert circuit_breakers.state(NOW, 4, now=later) == "half-open (4 failed in a row)"


def test_a_lease_no_longer_than_the_timeout_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="AGENTQ_WEBHOOK_LEASE_S"):
        Settings(webhook_timeout_s=10, webhook_lease_s=10)
