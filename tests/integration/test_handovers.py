"""A taken step's message handed over to a step queued without one (`models.engine.handovers`):
which step a message wakes for, and what a worker that ends a step still sends.

The steps are inserted only (`make_run(start=False)`) and moved by hand in one transaction, so
no worker touches them; the engine's own use is in test_fair_queue.py (a chain hands over) and
the fault suite (nothing lost, nothing doubled)."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
import sqlalchemy as sa
from sqlmodel import Session

from models.db import session_scope
from models.engine import fair_queue, handovers
from models.engine.queue import TASK_EXECUTE_STEP, TASK_PLAN
from tests.integration.conftest import run_steps
from worker.execution import wakeups

pytestmark = pytest.mark.integration


def _noop(name: str) -> dict[str, object]:
    return {"name": name, "kind": "tool", "tool": "noop", "after": []}


def _set(session: Session, step_id: int, status: str, wake_via: int | None = None) -> None:
    session.execute(
        sa.text("UPDATE steps SET status = :status, wake_via = :via WHERE id = :id"),
        {"status": status, "via": wake_via, "id": step_id},
    )


@pytest.fixture
def four(make_run: Callable[..., int]) -> list[int]:
    """The ids of four steps of one run, inserted only (all `pending`), of a user of their own:
    the steps moved by hand stay `queued` or `running`, holding that user's dispatch slots."""
    user = f"handovers-{uuid.uuid4().hex[:8]}"
    run_id = make_run([_noop(name) for name in "abcd"], start=False, user=user)
    return [step.id or 0 for step in run_steps(run_id)]


def test_a_message_wakes_for_its_own_step_while_it_is_queued(four: list[int]) -> None:
    a, b, _, _ = four
    with session_scope() as session:
        _set(session, a, "queued")
        _set(session, b, "queued", wake_via=a)
        assert handovers.heir(session, a) == a  # queued: its own message is its own
        assert handovers.heir(session, b) == b


def test_a_taken_steps_message_wakes_for_the_nearest_step_still_queued(four: list[int]) -> None:
    """a was taken (running) and handed its message to b; b was taken too and handed it on to
    c: the message of a wakes for c. Once c is taken and nothing holds it, it is spent."""
    a, b, c, d = four
    with session_scope() as session:
        _set(session, a, "running")
        _set(session, b, "succeeded", wake_via=a)
        _set(session, c, "queued", wake_via=b)
        _set(session, d, "queued")  # queued, but no pointer to it: not this message's
        assert handovers.heir(session, a) == c
        assert handovers.heir(session, b) == c
        _set(session, c, "running", wake_via=b)
        assert handovers.heir(session, a) is None


def test_a_cycle_of_pointers_ends(four: list[int]) -> None:
    """A step queued again after it was taken may point back along its own line."""
    a, b, _, _ = four
    with session_scope() as session:
        _set(session, a, "running", wake_via=b)
        _set(session, b, "running", wake_via=a)
        assert handovers.heir(session, a) is None


def test_hand_over_is_guarded_by_the_heirs_status(four: list[int]) -> None:
    a, b, c, _ = four
    with session_scope() as session:
        _set(session, a, "running")
        _set(session, b, "queued")
        _set(session, c, "running")
        assert handovers.hand_over(session, taken=a, heir=b)
        assert not handovers.hand_over(session, taken=a, heir=c)  # taken since: nothing written
        pointers = dict(
            session.execute(
                sa.text("SELECT id, wake_via FROM steps WHERE id = ANY(:ids)"), {"ids": [b, c]}
            ).all()
        )
    assert pointers == {b: a, c: None}


def test_a_chain_sends_nothing_for_a_step_its_taken_steps_message_wakes_for(
    four: list[int],
) -> None:
    """A worker that ended a step queued b and c (their sends still to go) and took a, queued
    with its message out: b takes over a's message and is sent none; c keeps its own; a plan
    task is no step's. Had it taken b itself, b's own send is what goes."""
    a, b, c, _ = four
    sends = [(TASK_EXECUTE_STEP, (b,)), (TASK_EXECUTE_STEP, (c,)), (TASK_PLAN, (7,))]
    with session_scope() as session:
        _set(session, a, "running")
        _set(session, b, "queued")
        _set(session, c, "queued")
        assert handovers.handed_in_chain(session, sends, taken=a) == sends[1:]
        assert handovers.heir(session, a) == b
        assert handovers.handed_in_chain(session, sends, taken=b) == [sends[1], sends[2]]
        only_plan = [(TASK_PLAN, (7,))]
        assert handovers.handed_in_chain(session, only_plan, taken=a) == only_plan


def test_a_wake_up_hands_the_item_it_took_to_the_step_it_woke_for(four: list[int]) -> None:
    """A wake-up for b's message took queued a instead: b takes over a's message and is sent none;
    had b been taken meanwhile and its message handed to c, c takes it over; a lost worker's step
    taken back (running) had no message to hand, so the step woken for is sent one."""
    a, b, c, _ = four
    taken = fair_queue.Item(user_id="u", run_id=0, step_id=a, status="queued")
    with session_scope() as session:
        _set(session, a, "running")
        _set(session, b, "queued")
        assert wakeups._pass_on(session, taken, b, b) == []
        assert handovers.heir(session, a) == b
        _set(session, b, "running")
        _set(session, c, "queued", wake_via=b)
        assert wakeups._pass_on(session, taken, b, b) == []  # b was taken: its heir c
        assert handovers.heir(session, a) == c
        back = fair_queue.Item(user_id="u", run_id=0, step_id=a, status="running")
        assert wakeups._pass_on(session, back, c, c) == [(TASK_EXECUTE_STEP, (c,))]
