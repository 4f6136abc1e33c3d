"""The reconciler tells a lost message from a long queue (issue 11, item 5), on the real stack:
the broker's queue depth is read from Redis, a queued step whose message is gone is sent again,
and the steps whose messages may still be waiting are left alone."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest

from models import queue
from models.db import session_scope
from models.settings import get_settings
from models.tables import Step, utcnow
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
    older = _queued_without_a_message(make_run, behind_s=stale_s + 20)
    newer = _queued_without_a_message(make_run, behind_s=stale_s + 10)
    now = utcnow()
    stale = now - timedelta(seconds=stale_s)
    with session_scope() as session:
        due = tasks._due_queued(session, now)

        def lost(waiting: int | None) -> list[int | None]:
            return [s.id for s in tasks._lost_steps(session, stale, now, waiting)]

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
