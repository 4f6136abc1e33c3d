"""Webhooks from the outbox (issue 15) on the real stack: an engine of its own (its scheduler's
beat sends every 0.2 s, back-off 0.2 s) posting to a real local HTTP receiver
(`tests/support/webhook_receiver.py`).

Each test subscribes its own user, so no test sees another's deliveries; the retry window is
this process's setting (`AGENTQ_WEBHOOK_RETRY_WINDOW_S`), as it is fixed when an event writes its
delivery, and the events are written here (an escalation) or by the engine (a run's end).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from models import commands, deliveries, run_transitions, submissions
from models.db import session_scope
from models.plans import parse_plan
from models.runs import submit_run
from models.settings import get_settings
from models.submissions import RunRequest
from models.webhook_tables import WebhookAttempt, WebhookDelivery
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, other_engine, wait_for_run
from tests.support.net import free_port
from tests.support.webhook_receiver import HANG, Received, Receiver

pytestmark = pytest.mark.integration
SECRET = "whsec-test-0123456789abcdef"
NOOP = {"steps": [{"name": "only", "kind": "tool", "tool": "noop"}]}
WEBHOOK_ENV = {
    "AGENTQ_WEBHOOK_SECRET": SECRET,
    "AGENTQ_WEBHOOK_FIRST_BACKOFF_S": "0.2",
    "AGENTQ_WEBHOOK_POLL_INTERVAL_S": "0.2",
    "AGENTQ_WEBHOOK_TIMEOUT_S": "3",
    "AGENTQ_WEBHOOK_LEASE_S": "4",
    "NO_PROXY": "127.0.0.1,localhost",
}
ARRIVE_S = 30.0  # generous on a loaded 2-core machine; a delivery comes within a second here


@pytest.fixture(scope="module")
def webhook_engine() -> Iterator[LocalStack]:
    with pytest.MonkeyPatch.context() as patch:
        for name, value in {**TEST_ENV, **WEBHOOK_ENV}.items():
            patch.setenv(name, value)
        with other_engine({**TEST_ENV, **WEBHOOK_ENV}, worker_concurrency=1) as stack:
            yield stack
    get_settings.cache_clear()


def verify(secret: str, request: Received, tolerance_s: float = 300) -> bool:
    """The receiver's check, as the README gives it."""
    timestamp = request.headers["x-agentq-timestamp"]
    signed = timestamp.encode() + b"." + request.body
    expected = "sha256=" + hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    fresh = abs(time.time() - int(timestamp)) <= tolerance_s
    return fresh and hmac.compare_digest(expected, request.headers["x-agentq-signature"])


def escalate(user: str) -> int:
    """A run of `user` escalated here (`escalation.opened`); its id."""
    plan = parse_plan(NOOP, tools={"noop"})
    with session_scope() as session:
        run = submit_run(session, settings=get_settings(), user_id=user, goal="hook", plan=plan)
        run_id = run.id or 0
        run_transitions.escalate(session, run_id, expected="running", reason="test")
    return run_id


def deliveries_of(run_id: int) -> list[WebhookDelivery]:
    with session_scope() as session:
        return [
            d.delivery
            for d in deliveries.recent(session, limit=1000)
            if d.delivery.run_id == run_id
        ]


def wait_for_status(run_id: int, status: str, timeout_s: float = ARRIVE_S) -> WebhookDelivery:
    deadline = time.monotonic() + timeout_s
    while True:
        found = deliveries_of(run_id)
        if found and found[0].status == status:
            return found[0]
        assert time.monotonic() < deadline, f"run {run_id}'s delivery: {found}"
        time.sleep(0.1)


def restart(stack: LocalStack, timeout_s: float = 30) -> None:
    """Start the killed scheduler again, once it has exited."""
    deadline = time.monotonic() + timeout_s
    while stack.restart_dead() != ["scheduler"]:
        assert time.monotonic() < deadline, "the killed scheduler did not exit"
        time.sleep(0.05)
    stack.wait_for_log("scheduler", "ready.", 90)


def attempts(delivery_id: int) -> list[WebhookAttempt]:
    with session_scope() as session:
        return deliveries.attempts_of(session, delivery_id)


def test_an_escalation_is_delivered_once_signed_with_its_idempotency_key(
    webhook_engine: LocalStack,
) -> None:
    with Receiver() as receiver:
        commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-1")
        run_id = escalate("hook-1")
        (request,) = receiver.wait_for(1, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
        time.sleep(1.0)  # five beat ticks: nothing is sent again
        assert len(receiver.requests) == 1
    assert verify(SECRET, request)
    assert not verify("another secret", request)
    assert request.headers["idempotency-key"] == str(delivery.key)
    assert request.headers["x-agentq-event"] == "escalation.opened"
    body = json.loads(request.body)
    assert body["event"] == "escalation.opened"
    assert (body["run"]["id"], body["run"]["user_id"]) == (run_id, "hook-1")
    assert body["escalation"]["reason"] == "test"
    assert delivery.attempts == 1
    assert [(a.attempt, a.status_code, a.error) for a in attempts(delivery.id or 0)] == [
        (1, 200, None)
    ]


def test_only_the_subscribed_events_of_the_subscribed_user_are_written(
    webhook_engine: LocalStack,
) -> None:
    commands.add_webhook(url="http://127.0.0.1:9/x", events=["run.finished"], user_id="hook-2")
    assert deliveries_of(escalate("hook-2")) == []  # not an event it asked for
    assert deliveries_of(escalate("hook-2-other")) == []  # not its user


def test_a_change_that_rolls_back_writes_no_delivery(webhook_engine: LocalStack) -> None:
    commands.add_webhook(url="http://127.0.0.1:9/x", events=["escalation.opened"], user_id="h-3")
    plan = parse_plan(NOOP, tools={"noop"})
    with session_scope() as session:
        run_id = submit_run(session, settings=get_settings(), user_id="h-3", goal="g", plan=plan).id
    with pytest.raises(RuntimeError), session_scope() as session:
        run_transitions.escalate(session, run_id or 0, expected="running", reason="test")
        raise RuntimeError("the transaction fails after the escalation")
    assert deliveries_of(run_id or 0) == []


def test_a_finished_run_is_delivered(webhook_engine: LocalStack) -> None:
    with Receiver() as receiver:
        commands.add_webhook(url=receiver.url, events=["run.finished"], user_id="hook-4")
        request = RunRequest(user_id="hook-4", goal="finish", plan=parse_plan(NOOP, tools={"noop"}))
        run_id = submissions.submit(request, settings=get_settings()).run_id
        assert wait_for_run(run_id).status == "succeeded"
        (got,) = receiver.wait_for(1, ARRIVE_S)
    body = json.loads(got.body)
    assert (body["event"], body["run"]["id"], body["run"]["status"]) == (
        "run.finished",
        run_id,
        "succeeded",
    )
    assert verify(SECRET, got)


def test_a_receiver_that_fails_twice_then_recovers_gets_it_on_the_third_attempt(
    webhook_engine: LocalStack,
) -> None:
    with Receiver([500, 500]) as receiver:
        commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-5")
        run_id = escalate("hook-5")
        got = receiver.wait_for(3, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    assert len({r.headers["idempotency-key"] for r in got}) == 1
    assert {r.body for r in got} == {got[0].body} and all(verify(SECRET, r) for r in got)
    assert got[1].at - got[0].at >= 0.1  # the first back-off: 0.2 s, half of it at least
    logged = attempts(delivery.id or 0)
    assert [(a.attempt, a.status_code) for a in logged] == [(1, 500), (2, 500), (3, 200)]
    assert logged[0].error == "HTTP 500: no" and logged[2].error is None
    assert all(a.duration_ms is not None and a.duration_ms >= 0 for a in logged)


@pytest.fixture
def short_retry_window(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Deliveries written here are retried for 1.5 s only."""
    monkeypatch.setenv("AGENTQ_WEBHOOK_RETRY_WINDOW_S", "1.5")
    get_settings.cache_clear()
    yield
    monkeypatch.undo()
    get_settings.cache_clear()


@pytest.mark.usefixtures("short_retry_window")
def test_a_receiver_down_beyond_the_retry_window_is_given_up(webhook_engine: LocalStack) -> None:
    down = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens there
    commands.add_webhook(url=down, events=["escalation.opened"], user_id="hook-6")
    run_id = escalate("hook-6")
    delivery = wait_for_status(run_id, "failed")
    logged = attempts(delivery.id or 0)
    assert len(logged) >= 2 and all(a.status_code is None for a in logged)
    assert delivery.last_error is not None and "ConnectError" in delivery.last_error
    assert all(a.started_at <= delivery.give_up_at for a in logged)  # none after the window
    time.sleep(1.0)
    assert len(attempts(delivery.id or 0)) == len(logged)  # given up: not tried again


def test_a_webhook_is_delivered_signed_retried_and_not_lost_across_a_worker_restart(
    webhook_engine: LocalStack,
) -> None:
    """The sender dies mid-delivery (its scheduler is killed while the receiver holds the
    request); its lease expires and the restarted scheduler sends it again with the same
    key, gets a 500, retries, and delivers."""
    with Receiver([HANG, 500]) as receiver:
        commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-7")
        run_id = escalate("hook-7")
        receiver.wait_for(1, ARRIVE_S)
        os.kill(webhook_engine.pid("scheduler") or 0, signal.SIGKILL)
        restart(webhook_engine)
        got = receiver.wait_for(3, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    assert len({r.headers["idempotency-key"] for r in got}) == 1
    assert got[0].headers["idempotency-key"] == str(delivery.key)
    assert all(verify(SECRET, r) for r in got)
    assert got[1].at - got[0].at >= 3.5  # not before the dead sender's lease (4 s) expired
    logged = attempts(delivery.id or 0)
    assert [(a.attempt, a.status_code) for a in logged] == [(1, None), (2, 500), (3, 200)]
    assert logged[0].error == deliveries.LOST_ATTEMPT
    assert delivery.attempts == 3


def agentq(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as an operator runs it, on this engine (its URLs are in this environment)."""
    return subprocess.run(
        [shutil.which("agentq") or "agentq", *args],
        env={**os.environ, "COLUMNS": "250"},
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_an_operator_adds_a_webhook_from_the_cli_and_reads_its_log(
    webhook_engine: LocalStack,
) -> None:
    refused = agentq("webhook", "add", "http://127.0.0.1:9/", "--event", "review.needed")
    assert refused.returncode == 2
    assert "events: review.needed is not an event; use one or more of" in refused.stdout
    with Receiver() as receiver:
        added = agentq("webhook", "add", receiver.url, "--event", "escalation.opened")
        assert added.returncode == 0, added.stdout + added.stderr
        assert "gets escalation.opened of every user's runs" in added.stdout
        run_id = escalate("hook-cli")
        receiver.wait_for(1, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    listed = agentq("webhook", "list")
    assert receiver.url in listed.stdout and "default (set, ends …cdef)" in listed.stdout
    assert SECRET not in listed.stdout + added.stdout
    log = agentq("webhook", "deliveries", "--status", "delivered", "--limit", "1000")
    (line,) = [ln for ln in log.stdout.splitlines() if ln.split()[1:2] == [str(delivery.id)]]
    assert line.split()[2:6] == ["│", "escalation.opened", "│", str(run_id)], line
    assert "delivered" in line and "200" in line
    webhook_id = added.stdout.split()[1]
    removed = agentq("webhook", "remove", webhook_id)
    assert removed.returncode == 0 and f"webhook {webhook_id} removed" in removed.stdout
    assert deliveries_of(run_id) == []  # its log went with it
