"""The fair order on real Postgres (`models.engine.fair_queue`): least-served user first, oldest run
within a user, a lost worker's step before its user's younger runs, a returning user lifted, and
another user owed a turn once a time slice behind.

Each test sets its rows up in one transaction, reads the order there and rolls back, so the
engine's reconciler and workers never see them; other tests' rows share this database, so the
users here start far below any real service (-1e6 s) and so come first.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlmodel import Session

from models import sql
from models.db import session_scope
from models.engine import decisions, fair_queue
from models.settings import get_settings
from models.tables import Run, Step, utcnow
from tests.integration.conftest import run_steps

pytestmark = pytest.mark.integration
NOOP = {"name": "a", "kind": "tool", "tool": "noop"}
FLOOR_S = -1e6
SERVICE = "SELECT service_s FROM user_service WHERE user_id = :u"


def _user(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _served(session: Session, user: str, service_s: float) -> None:
    fair_queue.charge(session, user, 0.0)
    sql.execute(
        session,
        "UPDATE user_service SET service_s = :s WHERE user_id = :u",
        {"s": service_s, "u": user},
    )


def _waiting_step(
    session: Session, make_run: Callable[..., int], user: str, due_ago_s: float
) -> int:
    """A running run of `user` with one queued step due `due_ago_s` ago (not committed)."""
    run_id = make_run([NOOP], user=user, start=False)
    session.get(Run, run_id).status = "running"  # type: ignore[union-attr]
    step = session.get(Step, run_steps(run_id)[0].id)
    assert step is not None
    step.status, step.queued_at = "queued", utcnow() - timedelta(seconds=due_ago_s)
    session.flush()
    return step.id or 0


def _next(session: Session) -> fair_queue.Item | None:
    return fair_queue.next_item(session, now=utcnow())


def _done(session: Session, step_id: int) -> None:
    session.get(Step, step_id).status = "succeeded"  # type: ignore[union-attr]
    session.flush()


def test_the_least_served_user_goes_first_then_the_oldest_run(
    make_run: Callable[..., int],
) -> None:
    busy, light = _user("busy"), _user("light")
    with session_scope() as session:
        _served(session, busy, FLOOR_S + 15)
        _served(session, light, FLOOR_S)
        old_busy = _waiting_step(session, make_run, busy, due_ago_s=60)  # older, but served more
        light_old = _waiting_step(session, make_run, light, due_ago_s=1)  # the older run
        light_new = _waiting_step(session, make_run, light, due_ago_s=2)  # due earlier, run newer
        order = []
        for _ in range(3):
            item = _next(session)
            assert item is not None and item.step_id is not None
            order.append(item.step_id)
            _done(session, item.step_id)
        session.rollback()
    assert order == [light_old, light_new, old_busy]


def test_two_equally_served_users_take_turns(make_run: Callable[..., int]) -> None:
    a, b = _user("a"), _user("b")
    with session_scope() as session:
        _served(session, a, FLOOR_S)
        _served(session, b, FLOOR_S)
        a_step = _waiting_step(session, make_run, a, due_ago_s=3)
        b_step = _waiting_step(session, make_run, b, due_ago_s=2)
        first = _next(session)
        fair_queue.charge(session, a, 1.0)  # a's step ran 1 s
        _done(session, a_step)
        a_next = _waiting_step(session, make_run, a, due_ago_s=4)  # older than b's, a served more
        second = _next(session)
        session.rollback()
    assert first is not None and first.step_id == a_step
    assert second is not None and second.step_id == b_step and a_next != b_step


def test_a_lost_workers_step_goes_before_its_users_younger_runs(
    make_run: Callable[..., int],
) -> None:
    user = _user("lost")
    with session_scope() as session:
        _served(session, user, FLOOR_S)
        lost = _waiting_step(session, make_run, user, due_ago_s=1)  # claimed in-process: due late
        _waiting_step(session, make_run, user, due_ago_s=30)  # a younger run's, due earlier
        step = session.get(Step, lost)
        assert step is not None  # running under a lease that ran out: its worker died
        step.status, step.attempt = "running", 1
        step.lease_expires_at = utcnow() - timedelta(seconds=1)
        session.flush()
        item = _next(session)
        session.rollback()
    assert item is not None and item.step_id == lost and item.status == "running"


def test_a_user_back_from_a_pause_is_lifted_to_the_active_users_least(
    make_run: Callable[..., int],
) -> None:
    active, returning = _user("active"), _user("back")
    with session_scope() as session:
        _served(session, active, FLOOR_S + 100)
        _served(session, returning, FLOOR_S)  # idle for long: this would be credit
        _waiting_step(session, make_run, active, due_ago_s=1)
        fair_queue.lift(session, returning)
        lifted = sql.scalar(session, SERVICE, {"u": returning})
        fair_queue.lift(session, active)  # active already: keeps what it has
        kept = sql.scalar(session, SERVICE, {"u": active})
        session.rollback()
    assert lifted == FLOOR_S + 100  # the least among the active users
    assert kept == FLOOR_S + 100


def test_a_user_is_owed_a_turn_once_a_time_slice_behind(
    make_run: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`AGENTQ_FAIR_SLICE_S`: the worker ending a step of `a` runs `a`'s next one itself while
    the waiting `b` is less than one slice of service behind, and turns to `b` after."""
    monkeypatch.setenv("AGENTQ_FAIR_SLICE_S", "0.5")
    get_settings.cache_clear()
    a, b = _user("a"), _user("b")
    try:
        with session_scope() as session:
            _served(session, a, FLOOR_S)
            _served(session, b, FLOOR_S + 0.25)  # b has had a quarter second more than a
            a_run = make_run([NOOP], user=a, start=False)
            session.get(Run, a_run).status = "running"  # type: ignore[union-attr]
            _waiting_step(session, make_run, b, due_ago_s=1)
            within = decisions.lock(session, a_run, used_s=0.5)  # a 0.25 s ahead of b
            beyond = decisions.lock(session, a_run, used_s=0.8)  # 0.55 s ahead: over the slice
            session.rollback()
    finally:
        get_settings.cache_clear()
    assert within is not None and not within.others_waiting
    assert beyond is not None and beyond.others_waiting
