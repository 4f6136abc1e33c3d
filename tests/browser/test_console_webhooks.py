"""The console's webhook delivery log (`/ui/webhooks`) over HTTP: each delivery's event, run,
URL, status, attempts, last error and next retry; the subscriptions with their circuit
breakers; URLs without userinfo or query string, and of a receiver's answer only its status;
reviewers and admins only; linked from the navigation; an unknown status filter named with the
known ones."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import httpx
import pytest

from models.operations.webhook_tables import WebhookDelivery, WebhookSubscription
from models.tables import utcnow
from tests.support.console import Console

pytestmark = [pytest.mark.acceptance, pytest.mark.browser]
MakeToken = Callable[..., tuple[int, str]]
SignIn = Callable[[str], httpx.Client]


def _deliveries(console: Console, url: str) -> tuple[int, int, str]:
    """A subscription to `url` (disabled: later escalations of the session write nothing for
    it) with a delivery retrying (due in an hour: no sender takes it during the test) and one
    given up: (retrying id, failed id, the retry's time as shown)."""
    now = utcnow()
    with console.db() as session:
        sub = WebhookSubscription(
            url=url, events=["escalation.opened"], enabled=False, secret="whsec_console"
        )
        session.add(sub)
        session.flush()
        common = {"subscription_id": sub.id or 0, "snapshot": {}}
        retrying = WebhookDelivery(  # its retry is within its window, as the sender sets it
            **common,
            give_up_at=now + timedelta(hours=2),
            event="escalation.opened",
            status="pending",
            attempts=2,
            last_status_code=503,
            last_error="HTTP 503: receiver restarting",
            next_attempt_at=now + timedelta(hours=1),
        )
        failed = WebhookDelivery(
            **common,
            give_up_at=now,
            event="run.finished",
            status="failed",
            attempts=7,
            last_error="timed out",
        )
        session.add_all([retrying, failed])
        session.flush()
        return retrying.id or 0, failed.id or 0, f"{retrying.next_attempt_at:%Y-%m-%d %H:%M:%S}"


def test_the_delivery_log_lists_what_was_sent_and_what_is_retried(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    url = f"http://127.0.0.1:9/hooks/{uuid.uuid4().hex[:8]}"
    retrying, failed, next_retry = _deliveries(console, url)
    reviewer = sign_in(make_token("reviewer", "hooks-rory")[1])
    page = reviewer.get("/ui/webhooks")
    assert page.status_code == 200
    assert 'href="/ui/webhooks" class="active">Webhooks</a>' in page.text
    row = page.text.split(f'data-delivery="{retrying}"')[1].split("</tr>")[0]
    expected = ("escalation.opened", url, "pending", ">2<", ">503<", "receiver restarting")
    for shown in (*expected, next_retry):
        assert shown in row, shown
    only_failed = reviewer.get("/ui/webhooks", params={"status": "failed"}).text
    assert f'data-delivery="{failed}"' in only_failed
    assert f'data-delivery="{retrying}"' not in only_failed


def test_reviewers_see_urls_without_credentials_or_query_and_only_status_codes(
    console: Console, make_token: MakeToken, sign_in: SignIn
) -> None:
    tag = uuid.uuid4().hex[:8]
    url = f"https://rx:pw-{tag}@hooks-{tag}.example.com/in?token=tok-{tag}"
    now = utcnow()
    with console.db() as session:
        sub = WebhookSubscription(
            url=url,
            events=["run.finished"],
            enabled=False,
            secret=f"whsec_{tag}",
            failures=5,
            circuit_open_until=now + timedelta(minutes=10),
        )
        session.add(sub)
        session.flush()
        session.add(
            WebhookDelivery(
                subscription_id=sub.id or 0,
                snapshot={},
                give_up_at=now + timedelta(hours=1),
                event="run.finished",
                attempts=5,
                last_status_code=502,
                last_error="HTTP 502",
                next_attempt_at=now + timedelta(minutes=30),
            )
        )
        sub_id = sub.id
    for role in ("reviewer", "admin"):
        page = sign_in(make_token(role, f"hooks-{role}-{tag}")[1]).get("/ui/webhooks").text
        row = page.split(f'data-webhook="{sub_id}"')[1].split("</tr>")[0]
        assert f"https://***@hooks-{tag}.example.com/in?…" in row
        assert "open until" in row and "5 failed in a row" in row
        for secret in (f"pw-{tag}", f"tok-{tag}", f"whsec_{tag}"):
            assert secret not in page, (role, secret)
        assert ">502<" in page


def test_only_reviewers_and_admins_see_the_delivery_log(
    make_token: MakeToken, sign_in: SignIn
) -> None:
    submitter = sign_in(make_token("submitter", "hooks-sam", user="hooks")[1])
    assert submitter.get("/ui/webhooks").status_code == 403
    assert "/ui/webhooks" not in submitter.get("/ui/runs").text
    admin = sign_in(make_token("admin", "hooks-ada")[1])
    refused = admin.get("/ui/webhooks", params={"status": "lost"})
    assert refused.status_code == 400
    assert "status: &#39;lost&#39; is not one of pending, delivering, delivered, failed" in (
        refused.text
    )
