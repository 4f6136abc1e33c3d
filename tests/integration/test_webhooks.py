"""Webhooks from the outbox (issue 15) on the real stack: an engine of its own (its scheduler's
beat ticks every 0.2 s, its webhook sender process posts, back-off 0.2 s) posting to a real
local HTTP receiver (`tests/support/webhook_receiver.py`) on 127.0.0.1, which the engine's
`AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS` lets it reach.

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
import statistics
import subprocess
import time
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa

from models.db import session_scope
from models.engine import run_transitions, submissions
from models.engine.erased_runs import ERASED
from models.engine.runs import submit_run
from models.engine.submissions import RunRequest
from models.front import commands
from models.memory import memory_admin
from models.operations import deliveries, webhooks
from models.operations.webhook_tables import WebhookAttempt, WebhookDelivery, WebhookSubscription
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import utcnow
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, other_engine, wait_for_run
from tests.support.net import free_port
from tests.support.webhook_receiver import HANG, Received, Receiver

pytestmark = pytest.mark.integration
SECRET = "whsec-test-0123456789abcdef"  # the shared secret of subscriptions older than theirs
NOOP = {"steps": [{"name": "only", "kind": "tool", "tool": "noop"}]}
WEBHOOK_ENV = {
    "AGENTQ_WEBHOOK_SECRET": SECRET,
    "AGENTQ_WEBHOOK_FIRST_BACKOFF_S": "0.2",
    "AGENTQ_WEBHOOK_POLL_INTERVAL_S": "0.2",
    "AGENTQ_WEBHOOK_TIMEOUT_S": "3",
    "AGENTQ_WEBHOOK_LEASE_S": "4",
    "AGENTQ_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "true",
    "AGENTQ_WEBHOOK_BREAKER_FAILURES": "3",
    "AGENTQ_WEBHOOK_BREAKER_OPEN_S": "1",
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
    """The receiver's check, as the docs give it (docs/how-to/webhooks.md; its receiver is run
    as written by tests/unit/test_docs_webhook_receiver.py)."""
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
    """Start the killed webhook sender again, once it has exited."""
    deadline = time.monotonic() + timeout_s
    while stack.restart_dead() != ["sender"]:
        assert time.monotonic() < deadline, "the killed sender did not exit"
        time.sleep(0.05)
    stack.wait_for_log("sender", "ready.", 90)


def attempts(delivery_id: int) -> list[WebhookAttempt]:
    with session_scope() as session:
        return deliveries.attempts_of(session, delivery_id)


def test_an_escalation_is_delivered_once_signed_with_its_idempotency_key(
    webhook_engine: LocalStack,
) -> None:
    with Receiver() as receiver:
        sub = commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-1")
        run_id = escalate("hook-1")
        (request,) = receiver.wait_for(1, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
        time.sleep(1.0)  # five beat ticks: nothing is sent again
        assert len(receiver.requests) == 1
    assert sub.secret is not None and sub.secret.startswith("whsec_")
    assert verify(sub.secret, request)
    assert not verify(SECRET, request)
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
        sub = commands.add_webhook(url=receiver.url, events=["run.finished"], user_id="hook-4")
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
    assert body["run"]["goal"] == "finish"
    assert verify(sub.secret or "", got)


def test_a_receiver_that_fails_twice_then_recovers_gets_it_on_the_third_attempt(
    webhook_engine: LocalStack,
) -> None:
    with Receiver([500, 500]) as receiver:
        sub = commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-5")
        run_id = escalate("hook-5")
        got = receiver.wait_for(3, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    assert len({r.headers["idempotency-key"] for r in got}) == 1
    assert {r.body for r in got} == {got[0].body} and all(verify(sub.secret or "", r) for r in got)
    assert got[1].at - got[0].at >= 0.1  # the first back-off: 0.2 s, half of it at least
    logged = attempts(delivery.id or 0)
    assert [(a.attempt, a.status_code) for a in logged] == [(1, 500), (2, 500), (3, 200)]
    assert logged[0].error == "HTTP 500" and logged[2].error is None  # never the body ("no")
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
    """The sender dies mid-delivery (its process is killed while the receiver holds the
    request); its lease expires and the restarted sender sends it again with the same key,
    gets a 500, retries, and delivers."""
    with Receiver([HANG, 500]) as receiver:
        sub = commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="hook-7")
        run_id = escalate("hook-7")
        receiver.wait_for(1, ARRIVE_S)
        os.kill(webhook_engine.pid("sender") or 0, signal.SIGKILL)
        restart(webhook_engine)
        got = receiver.wait_for(3, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    assert len({r.headers["idempotency-key"] for r in got}) == 1
    assert got[0].headers["idempotency-key"] == str(delivery.key)
    assert all(verify(sub.secret or "", r) for r in got)
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
    assert "events: review.needed is not an event; use one or more of" in refused.stderr
    with Receiver() as receiver:
        added = agentq("webhook", "add", receiver.url, "--event", "escalation.opened")
        assert added.returncode == 0, added.stdout + added.stderr
        assert "gets escalation.opened of every user's runs" in added.stdout
        run_id = escalate("hook-cli")
        receiver.wait_for(1, ARRIVE_S)
        delivery = wait_for_status(run_id, "delivered")
    (secret,) = [ln.split()[-1] for ln in added.stdout.splitlines() if "signing secret" in ln]
    assert secret.startswith("whsec_") and "not shown again" in added.stdout
    listed = agentq("webhook", "list")
    assert receiver.url in listed.stdout and f"own (ends …{secret[-4:]})" in listed.stdout
    assert secret not in listed.stdout and "closed" in listed.stdout
    log = agentq("webhook", "deliveries", "--status", "delivered", "--limit", "1000")
    (line,) = [ln for ln in log.stdout.splitlines() if ln.split()[1:2] == [str(delivery.id)]]
    assert line.split()[2:6] == ["│", "escalation.opened", "│", str(run_id)], line
    assert "delivered" in line and "200" in line
    webhook_id = added.stdout.split()[1]
    removed = agentq("webhook", "remove", webhook_id)
    assert removed.returncode == 0 and f"webhook {webhook_id} removed" in removed.stdout
    assert deliveries_of(run_id) == []  # its log went with it


def test_each_subscription_signs_with_its_own_secret_and_rotating_replaces_it(
    webhook_engine: LocalStack,
) -> None:
    """Two receivers of one event get signatures only their own secret verifies, so neither
    can replay what it got to the other; a rotated secret signs from then on."""
    with Receiver() as first, Receiver() as second:
        one = commands.add_webhook(url=first.url, events=["escalation.opened"], user_id="h-own")
        two = commands.add_webhook(url=second.url, events=["escalation.opened"], user_id="h-own")
        escalate("h-own")
        (got_one,), (got_two,) = first.wait_for(1, ARRIVE_S), second.wait_for(1, ARRIVE_S)
        rotated = commands.rotate_webhook(one.id or 0)
        escalate("h-own")
        after = first.wait_for(2, ARRIVE_S)[1]
    assert one.secret and two.secret and rotated.secret and one.secret != two.secret
    assert verify(one.secret, got_one) and not verify(two.secret, got_one)
    assert verify(two.secret, got_two) and not verify(one.secret, got_two)
    assert rotated.secret != one.secret
    assert verify(rotated.secret, after) and not verify(one.secret, after)


def test_a_subscription_older_than_its_own_secret_keeps_the_shared_one_until_rotated(
    webhook_engine: LocalStack,
) -> None:
    """A row as migration 0032 leaves one made before: its receiver, which verifies with
    AGENTQ_WEBHOOK_SECRET, keeps working; once rotated it signs with its own."""
    with Receiver() as receiver:
        with session_scope() as session:
            old = WebhookSubscription(
                url=receiver.url,
                events=["escalation.opened"],
                user_id="h-old",
                secret_ref="default",
            )
            session.add(old)
            session.flush()
            old_id = old.id or 0
        escalate("h-old")
        (before,) = receiver.wait_for(1, ARRIVE_S)
        with session_scope() as session:
            shown = [
                s.secret for s in webhooks.listed(session, settings=get_settings(), now=utcnow())
            ]
        rotated = commands.rotate_webhook(old_id)
        escalate("h-old")
        after = receiver.wait_for(2, ARRIVE_S)[1]
    assert verify(SECRET, before)
    assert "shared default (set, ends …cdef): rotate it" in shown
    assert rotated.secret_ref is None and verify(rotated.secret or "", after)
    assert not verify(SECRET, after)


def deliveries_text(user: str) -> list[str]:
    """Every column of every delivery of `user`'s runs, as JSON text."""
    with session_scope() as session:
        rows = session.execute(
            sa.text(
                "SELECT CAST(to_jsonb(d) AS text) FROM webhook_deliveries d "
                "JOIN runs r ON r.id = d.run_id WHERE r.user_id = :user"
            ),
            {"user": user},
        )
        return list(rows.scalars())


def hold(subscription_id: int, *, until: datetime) -> None:
    """Set the subscription's circuit open until `until` (in the past: half-open), as its
    breaker would: while open, no sender claims its deliveries."""
    with session_scope() as session:
        row = session.get(WebhookSubscription, subscription_id)
        assert row is not None
        row.circuit_open_until = until


def test_forget_with_runs_leaves_the_goal_in_no_delivery(webhook_engine: LocalStack) -> None:
    """A delivery still pending when its user is forgotten (`forget --runs`) holds no goal, and
    the attempt that delivers it after the forget sends `[erased]` in its place. (Its circuit
    is held open across the forget, so no attempt claimed before it is in flight after it.)"""
    goal = "Pay invoice INV-7731 to Dr. Quillfeather"
    with Receiver(refusing=503) as receiver:
        sub = commands.add_webhook(url=receiver.url, events=["run.finished"], user_id="h-forget")
        request = RunRequest(user_id="h-forget", goal=goal, plan=parse_plan(NOOP, tools={"noop"}))
        run_id = submissions.submit(request, settings=get_settings()).run_id
        assert wait_for_run(run_id).status == "succeeded"
        (refused, *_) = receiver.wait_for(1, ARRIVE_S)
        hold(sub.id or 0, until=utcnow() + timedelta(hours=1))
        wait_for_status(run_id, "pending")  # no attempt in flight
        memory_admin.forget("h-forget", runs=True)
        stored = deliveries_text("h-forget")
        receiver.refusing = None
        hold(sub.id or 0, until=utcnow())  # half-open: the next attempt is claimed now
        delivery = wait_for_status(run_id, "delivered")
        sent = [r for r in receiver.requests if r.headers["idempotency-key"] == str(delivery.key)]
    assert json.loads(refused.body)["run"]["goal"] == goal  # before the forget
    assert stored and not [row for row in stored if "Quillfeather" in row]
    assert json.loads(sent[-1].body)["run"]["goal"] == ERASED
    assert b"Quillfeather" not in sent[-1].body
    assert not [row for row in deliveries_text("h-forget") if "Quillfeather" in row]


def run_time_s(user: str) -> float:
    """Seconds from submitting a run of `user` that the planner plans (so the coordinator
    decides on the plan's result) to seeing it succeed."""
    started = time.monotonic()
    request = RunRequest(user_id=user, goal="Summarise the week's expenses", plan=None)
    run_id = submissions.submit(request, settings=get_settings()).run_id
    assert wait_for_run(run_id).status == "succeeded"
    return time.monotonic() - started


def test_a_hanging_receiver_does_not_delay_another_users_run(webhook_engine: LocalStack) -> None:
    """With a receiver that never answers and a backlog of deliveries for it, another user's
    run takes as long as with none: the sender that waits for it decides no run."""
    alone = statistics.median(run_time_s("h-timed") for _ in range(5))
    with Receiver([HANG] * 50) as hanging:
        commands.add_webhook(url=hanging.url, events=["escalation.opened"], user_id="h-hang")
        for _ in range(6):
            escalate("h-hang")
        hanging.wait_for(1, ARRIVE_S)  # a sender waits for it now
        beside = statistics.median(run_time_s("h-timed") for _ in range(5))
    print(f"median run time: {alone:.2f} s alone, {beside:.2f} s beside a hanging receiver")
    assert beside < alone + 1.0, (alone, beside)


def subscription(subscription_id: int) -> WebhookSubscription:
    with session_scope() as session:
        row = session.get(WebhookSubscription, subscription_id)
        assert row is not None
        return row


def test_a_failing_receiver_opens_its_circuit_and_one_probe_closes_it(
    webhook_engine: LocalStack,
) -> None:
    """Three failures in a row (the engine's threshold) open the circuit for 1 s: nothing is
    sent; then one probe at a time, each failed one doubling the window; a 2xx closes it and
    the backlog is delivered."""
    with Receiver(refusing=500) as receiver:
        sub = commands.add_webhook(url=receiver.url, events=["escalation.opened"], user_id="h-cb")
        run_ids = [escalate("h-cb") for _ in range(4)]
        receiver.wait_for(3, ARRIVE_S)
        deadline = time.monotonic() + ARRIVE_S
        while (opened := subscription(sub.id or 0)).circuit_open_until is None:
            assert time.monotonic() < deadline, "the circuit did not open"
            time.sleep(0.02)
        tried = len(receiver.requests)
        open_s = (opened.circuit_open_until - utcnow()).total_seconds()
        time.sleep(max(0.0, open_s - 0.2))
        assert len(receiver.requests) == tried  # open: not one attempt
        receiver.wait_for(tried + 1, ARRIVE_S)  # the window ended: a probe
        time.sleep(0.5)
        probed = subscription(sub.id or 0)
        left_s = (probed.circuit_open_until or utcnow()) - utcnow()
        assert len(receiver.requests) == tried + 1  # one probe only, and it failed
        receiver.refusing = None
        delivered = [wait_for_status(run_id, "delivered") for run_id in run_ids]
        closed = subscription(sub.id or 0)
    assert opened.failures == 3 and 0 < open_s <= 1.0
    assert probed.failures == 4 and probed.circuit_open_until is not None
    assert left_s.total_seconds() > 0.5  # 2 s this time, 0.5 s of it passed
    assert (closed.failures, closed.circuit_open_until) == (0, None)
    assert all(d.status == "delivered" for d in delivered)
