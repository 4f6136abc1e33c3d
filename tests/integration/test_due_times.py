"""A step's due time lives in its row (issue 11, item 2), on real Postgres: a message delivered
before the step is due (kombu redelivers a countdown longer than the visibility timeout early,
kombu#337) claims nothing and is sent again for the time left; a retry's backoff sets the due
time, and the reconciler counts a step's staleness only from it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import select

from models.db import session_scope
from models.engine import queue, step_transitions
from models.engine.queue import TASK_EXECUTE_STEP
from models.tables import Step, StepAttempt, utcnow
from scheduler import tasks
from tests.integration.conftest import queued_without_a_message
from worker.execution import messages

pytestmark = pytest.mark.integration


def test_a_message_before_the_due_time_claims_nothing_and_comes_back_then(
    engine: object, make_run: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    step_id = queued_without_a_message(make_run, "due", utcnow() + timedelta(seconds=170))
    sent: list[tuple[str, tuple[Any, ...], float | None]] = []
    monkeypatch.setattr(
        queue, "send", lambda task, *args, countdown=None: sent.append((task, args, countdown))
    )
    assert messages.claim(step_id) is None
    ((task, args, countdown),) = sent
    assert (task, args) == (TASK_EXECUTE_STEP, (step_id,))
    assert countdown is not None and 160 < countdown <= 170
    with session_scope() as session:
        step = session.get(Step, step_id)
        tries = session.exec(select(StepAttempt).where(StepAttempt.step_id == step_id)).all()
    assert step is not None and (step.status, step.attempt, list(tries)) == ("queued", 0, [])


def test_a_retry_is_due_after_its_backoff_and_not_stale_before(
    engine: object, make_run: Callable[..., int]
) -> None:
    step_id = queued_without_a_message(make_run, "due", utcnow())
    claimed = messages.claim(step_id)
    assert claimed is not None
    with session_scope() as session:
        retried = step_transitions.retry_step(
            session, step_id, attempt=claimed.step.attempt, error="flaky", backoff_s=300
        )
        assert retried.queued_at is not None
        due_in = (retried.queued_at - utcnow()).total_seconds()
    assert 290 < due_in <= 300
    now = utcnow()
    with session_scope() as session:  # stale by the clock it was queued, not by its due time
        lost = tasks._lost_steps(session, now - timedelta(seconds=60), now, waiting=None)
        assert step_id not in lost
        session.rollback()


def backdated_retry(make_run: Callable[..., int], backoff_s: float) -> int:
    """A step retried `backoff_s` ago with that backoff: due now, its attempt ended then."""
    step_id = queued_without_a_message(make_run, "held", utcnow())
    claimed = messages.claim(step_id)
    assert claimed is not None
    with session_scope() as session:
        step_transitions.retry_step(
            session, step_id, attempt=claimed.step.attempt, error="flaky", backoff_s=backoff_s
        )
    with session_scope() as session:
        step = session.get(Step, step_id)
        attempt = session.exec(select(StepAttempt).where(StepAttempt.step_id == step_id)).one()
        assert step is not None and step.queued_at is not None and attempt.finished_at is not None
        step.queued_at = utcnow() - timedelta(seconds=0.5)
        attempt.finished_at = step.queued_at - timedelta(seconds=backoff_s)
    return step_id


@pytest.mark.parametrize(("backoff_s", "sent_when_due"), [(300.0, True), (5.0, False)])
def test_a_delay_held_in_postgres_is_sent_by_the_first_reconcile_after_it_is_due(
    engine: object,
    make_run: Callable[..., int],
    monkeypatch: pytest.MonkeyPatch,
    backoff_s: float,
    sent_when_due: bool,
) -> None:
    """300 s is over half the visibility timeout (120 s here): no message was parked in the
    broker (`queue.held_back`), so the reconciler sends it once due, not AGENTQ_QUEUED_STALE_S
    later (issue 11: the suite's 429 steps waited 60 s past their retry-after). A 5 s backoff had
    its countdown message, which arrives by itself: not sent again."""
    step_id = backdated_retry(make_run, backoff_s)
    sent: list[tuple[str, tuple[Any, ...]]] = []
    monkeypatch.setattr(
        queue, "send", lambda task, *args, countdown=None: sent.append((task, args))
    )
    tasks.reconcile()
    assert ((TASK_EXECUTE_STEP, (step_id,)) in sent) is sent_when_due
