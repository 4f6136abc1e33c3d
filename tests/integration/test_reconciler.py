"""The reconciler tells a lost message from a long queue (issue 11, item 5), on the real stack:
the broker's queue depth is read from Redis, a queued step whose message is gone is sent again,
and the steps whose messages may still be waiting are left alone."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from models.db import session_scope
from models.engine import queue, reconciliation
from models.settings import get_settings
from models.tables import Run, Step, utcnow
from ops.stack import LocalStack
from scheduler import tasks
from tests.integration.conftest import queued_without_a_message, wait_for_run

pytestmark = pytest.mark.integration


def _queued_without_a_message(make_run: Callable[..., int], behind_s: float) -> int:
    """A queued step, queued `behind_s` seconds ago, whose message was lost; its id."""
    user = f"lost-{uuid.uuid4().hex[:8]}"
    return queued_without_a_message(make_run, user, utcnow() - timedelta(seconds=behind_s))


def test_the_queue_depth_is_what_waits_in_the_broker(engine: LocalStack) -> None:
    name = f"depth-{uuid.uuid4().hex[:8]}"  # a queue no worker consumes
    assert queue.depth(name) == 0
    for _ in range(3):
        queue.client().send_task(queue.TASK_RAW_NOOP, queue=name, ignore_result=True)
    assert queue.depth(name) == 3


@pytest.mark.parametrize(
    ("due", "waiting", "lost"),
    [(10, 10, 0), (10, 3, 7), (3, 10, 0), (0, 0, 0), (10, None, None)],
)
def test_only_the_steps_older_than_every_waiting_message_may_be_lost(
    due: int, waiting: int | None, lost: int | None
) -> None:
    assert tasks.lost_at_most(due, waiting) == lost


def test_a_stale_step_is_left_alone_while_its_message_may_still_wait(
    engine: LocalStack, make_run: Callable[..., int]
) -> None:
    stale_s = get_settings().queued_stale_s
    # Queued an hour ahead, then made stale in this transaction alone: the engine's own beat
    # (every second here) never sees them stale, so it cannot re-send them meanwhile.
    older = _queued_without_a_message(make_run, behind_s=-3600)
    newer = _queued_without_a_message(make_run, behind_s=-3600)
    now = utcnow()
    stale = now - timedelta(seconds=stale_s)
    with session_scope() as session:
        for step_id, behind_s in ((older, stale_s + 20), (newer, stale_s + 10)):
            step = session.get(Step, step_id)
            assert step is not None
            step.queued_at = now - timedelta(seconds=behind_s)
        session.flush()
        due = reconciliation.due_queued(session, now=now)

        def lost(waiting: int | None) -> list[int | None]:
            return list(tasks._lost_steps(session, stale, now, waiting))

        a_long_queue, one_taken, unknown = lost(due), lost(due - 1), lost(None)
        session.rollback()  # nothing is re-sent here: the engine's own beat does that
    assert {older, newer}.isdisjoint(a_long_queue)
    assert len(one_taken) == 1 and one_taken[0] != newer  # the oldest stale step alone
    assert {older, newer} <= set(unknown)


def test_a_queued_step_whose_message_was_lost_is_sent_again(
    engine: LocalStack, make_run: Callable[..., int]
) -> None:
    step_id = _queued_without_a_message(make_run, behind_s=get_settings().queued_stale_s + 1)
    tasks.reconcile()  # as the beat does (the engine's own beat may get there first)
    with session_scope() as session:
        step = session.get(Step, step_id)
        assert step is not None
        run_id = step.run_id
    assert wait_for_run(run_id).status == "succeeded"


def test_the_broker_epoch_is_new_once(engine: LocalStack) -> None:
    """`SET NX` on Redis: the first asker learns the key was absent, every later one that it
    was not (until the broker comes back empty: tests/integration/test_broker_restart.py)."""
    key = f"agentq:test-epoch-{uuid.uuid4().hex[:8]}"
    assert [queue.broker_restarted(key) for _ in range(3)] == [True, False, False]


def _quiet_since(run_id: int, step_id: int) -> tuple[datetime, datetime]:
    """The run's `updated_at` and the step's `queued_at`: what a nudge and a re-send move."""
    with session_scope() as session:
        run, step = session.get(Run, run_id), session.get(Step, step_id)
        assert run is not None and step is not None and step.queued_at is not None
        return run.updated_at, step.queued_at


def _held_phase(make_run: Callable[..., int]) -> int:
    """A run planning under a live phase lease, quiet for an hour: its planner is at work."""
    run_id = make_run(None, start=False)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status, run.phase_attempt = "planning", 1
        run.phase_lease_expires_at = utcnow() + timedelta(hours=1)
        run.updated_at = utcnow() - timedelta(hours=1)
    return run_id


def _end(run_id: int) -> None:
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status, run.phase_lease_expires_at = "cancelled", None


@pytest.mark.parametrize("restarted", [True, False])
def test_after_the_broker_came_back_empty_nothing_waiting_is_waited_for(
    engine: LocalStack,
    make_run: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
    restarted: bool,
) -> None:
    """Issue 11: a broker restarted empty lost every message, so a step queued a moment ago is
    sent again, and its quiet run nudged, by the next reconcile, not `queued_stale_s` and
    `phase_stale_s` later; with the broker's memory intact both cut-offs hold. A phase under a
    live lease is left alone either way."""
    monkeypatch.setattr(queue, "broker_restarted", lambda: restarted)
    step_id = _queued_without_a_message(make_run, behind_s=0.5)
    with session_scope() as session:
        step = session.get(Step, step_id)
        assert step is not None
        run_id = step.run_id
    held = _held_phase(make_run)
    try:
        run_before, step_before = _quiet_since(run_id, step_id)
        held_before, _ = _quiet_since(held, step_id)
        counts = tasks.reconcile()
        run_after, step_after = _quiet_since(run_id, step_id)
        held_after, _ = _quiet_since(held, step_id)
    finally:
        _end(held)
    assert counts["broker_restarted"] == int(restarted)
    assert (step_after > step_before) is restarted  # re-sent: its next re-send waits a period
    assert (run_after > run_before) is restarted
    assert held_after == held_before
    if restarted:
        assert wait_for_run(run_id, timeout_s=30).status == "succeeded"


def ended_without_memory(make_run: Callable[..., int], ended_s_ago: float) -> int:
    """A run that ended (`succeeded`) `ended_s_ago` seconds ago whose memory task never ran:
    the `agentq.remember_run` its end sent was lost. Its id."""
    run_id = make_run([{"name": "only", "kind": "tool", "tool": "noop"}], start=False)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.status, run.finished_at = "succeeded", utcnow() - timedelta(seconds=ended_s_ago)
    return run_id


def _memory_asked_for(run_id: int, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Whether one reconcile pass (the broker not restarted) sends run `run_id`'s memory task."""
    sent: list[tuple[str, tuple[object, ...]]] = []
    monkeypatch.setattr(
        queue, "send", lambda task, *args, countdown=None: sent.append((task, args))
    )
    monkeypatch.setattr(queue, "broker_restarted", lambda: False)
    tasks.reconcile()
    return (queue.TASK_REMEMBER_RUN, (run_id,)) in sent


@pytest.mark.parametrize(("ended_s_ago", "asked_again"), [(0.5, False), (11.0, True), (60, False)])
def test_an_ended_run_whose_memory_task_never_came_is_asked_for_it_once(
    engine: LocalStack,
    make_run: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
    ended_s_ago: float,
    asked_again: bool,
) -> None:
    """AGENTQ_PHASE_STALE_S is 10 s here, the reconcile interval 1 s: a run ended 11 s ago is in
    the tick's window and gets its memory task again; one ended just now may still get its
    own message (the memory queue may be behind), one ended a minute ago was asked already
    (issue 11: runs whose message Redis lost when it restarted empty never had their memory)."""
    run_id = ended_without_memory(make_run, ended_s_ago)
    assert _memory_asked_for(run_id, monkeypatch) is asked_again


@pytest.mark.parametrize(
    ("lease_ended_s_ago", "asked_again"), [(-5.0, False), (0.5, True), (30.0, False)]
)
def test_a_run_whose_memory_task_died_holding_its_claim_is_asked_for_it_once(
    engine: LocalStack,
    make_run: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
    lease_ended_s_ago: float,
    asked_again: bool,
) -> None:
    """A memory task killed while it held the run's extraction claim: the redelivery of its
    message finds the lease live and does nothing, and the run ended a minute ago, past the
    reconciler's first ask (issue 11: two runs of the kill-workers scenario were never
    remembered). Once the lease has run out, in the tick's window, the run is asked for again;
    while it is live the holder may still be writing, and one that ran out long ago was asked."""
    run_id = ended_without_memory(make_run, 60.0)
    with session_scope() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run.phase_attempt += 1
        run.phase_lease_expires_at = utcnow() - timedelta(seconds=lease_ended_s_ago)
    assert _memory_asked_for(run_id, monkeypatch) is asked_again
