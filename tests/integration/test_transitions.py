"""Guarded transitions on real Postgres: legal moves apply, illegal ones change nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import leases, run_transitions, step_transitions, transitions
from models.errors import BudgetExhausted, IllegalTransition
from models.states import RUN_MOVES, RUN_STATUSES, STEP_MOVES, STEP_STATUSES
from models.tables import Escalation, Run, RunEvent, Step, utcnow
from tests.integration.conftest import run_steps

pytestmark = pytest.mark.integration
NOOP = {"name": "a", "kind": "tool", "tool": "noop"}


def _force(model: type[Any], row_id: int, status: str) -> None:
    """Put a row in `status` directly: test set-up only, bypassing the transitions."""
    with session_scope() as session:
        row = session.get(model, row_id)
        row.status = status


def _snapshot(model: type[Any], row_id: int) -> dict[str, Any]:
    with session_scope() as session:
        return session.get(model, row_id).model_dump()


def _event_count(run_id: int) -> int:
    with session_scope() as session:
        return len(session.exec(select(RunEvent.id).where(RunEvent.run_id == run_id)).all())


STEP_CALLS: dict[str, Callable[[Any, int], Any]] = {
    "ready": lambda s, i: step_transitions.ready_step(s, i),
    "queued": lambda s, i: step_transitions.enqueue_step(s, i),
    "running": lambda s, i: leases.claim(s, i, worker="t", lease_s=5, now=utcnow()),
    "succeeded": lambda s, i: leases.end_attempt(
        s, s.get(Step, i), to="succeeded", now=utcnow(), result={}
    ),
    "failed": lambda s, i: leases.end_attempt(
        s, s.get(Step, i), to="failed", now=utcnow(), error="x"
    ),
    "cancelled": lambda s, i: transitions.cancel_step(s, i),
    "waiting_approval": lambda s, i: step_transitions.await_approval(
        s, i, attempt=s.get(Step, i).attempt, why="x"
    ),
}


@pytest.mark.parametrize(
    ("found", "to"),
    [(f, t) for f in STEP_STATUSES for t in STEP_CALLS if (f, t) not in STEP_MOVES],
)
def test_illegal_step_transition_is_refused_and_changes_nothing(
    make_run: Callable[..., int], found: str, to: str
) -> None:
    # A user of its own: a coordinator decision for another run of its user would dispatch a
    # step forced to `ready` (models.engine.dispatch) while the test looks at it.
    run_id = make_run([NOOP], start=False, user=f"illegal-{found}-{to}")
    (step,) = run_steps(run_id)
    _force(Step, step.id or 0, found)
    before, events = _snapshot(Step, step.id or 0), _event_count(run_id)
    with session_scope() as session, pytest.raises(IllegalTransition) as info:
        STEP_CALLS[to](session, step.id or 0)
    assert info.value.found == found and f"step {step.id} is {found!r}" in str(info.value)
    assert _snapshot(Step, step.id or 0) == before
    assert _event_count(run_id) == events


RUN_CALLS: dict[str, Callable[[Any, int], Any]] = {
    "planning": lambda s, i: run_transitions.start_planning(s, i),
    "replanning": lambda s, i: run_transitions.start_replanning(s, i),
    "synthesizing": lambda s, i: run_transitions.start_synthesis(s, i),
    "succeeded": lambda s, i: run_transitions.succeed_run(s, i, final_result={}),
    "failed": lambda s, i: transitions.fail_run(s, i, error="x"),
}


@pytest.mark.parametrize(
    ("found", "to"),
    [(f, t) for f in RUN_STATUSES for t in RUN_CALLS if (f, t) not in RUN_MOVES],
)
def test_illegal_run_transition_is_refused_and_changes_nothing(
    make_run: Callable[..., int], found: str, to: str
) -> None:
    # A user of its own: a run forced into a phase with no task in flight would hold one of its
    # user's dispatch slots for good (models.engine.dispatch), and the session's runs share
    # `tester`.
    run_id = make_run([NOOP], start=False, user=f"illegal-{found}-{to}")
    _force(Run, run_id, found)
    before = _snapshot(Run, run_id)
    with session_scope() as session, pytest.raises(IllegalTransition) as info:
        RUN_CALLS[to](session, run_id)
    assert info.value.found == found and f"run {run_id} is {found!r}" in str(info.value)
    assert _snapshot(Run, run_id) == before


def test_unlisted_move_is_a_programming_error(make_run: Callable[..., int]) -> None:
    run_id = make_run([NOOP], start=False)
    with session_scope() as session, pytest.raises(ValueError, match="not a legal move"):
        transitions.resume_run(session, run_id, expected="succeeded", plan_version=1)


def test_completion_by_a_stale_attempt_is_refused(make_run: Callable[..., int]) -> None:
    run_id = make_run([NOOP], start=False)
    (step,) = run_steps(run_id)
    with session_scope() as session:
        step_transitions.ready_step(session, step.id or 0)
        step_transitions.enqueue_step(session, step.id or 0)
        claimed = leases.claim(session, step.id or 0, worker="t", lease_s=5, now=utcnow()).step
    assert claimed.attempt == 1
    stale = Step(**{**claimed.model_dump(), "attempt": 7})
    with session_scope() as session, pytest.raises(IllegalTransition, match="at attempt 7"):
        leases.end_attempt(session, stale, to="succeeded", now=utcnow(), result={"x": 1})
    assert _snapshot(Step, step.id or 0)["status"] == "running"


def test_replan_budget_is_charged_atomically(make_run: Callable[..., int]) -> None:
    run_id = make_run([NOOP], start=False, replans=1)
    with session_scope() as session:
        run_transitions.start_replanning(session, run_id)
    _force(Run, run_id, "running")
    with session_scope() as session, pytest.raises(BudgetExhausted, match="replan budget spent"):
        run_transitions.start_replanning(session, run_id)
    assert _snapshot(Run, run_id)["replans_used"] == 1


def test_one_open_escalation_per_run_and_plan_version(make_run: Callable[..., int]) -> None:
    run_id = make_run([NOOP], start=False)
    with session_scope() as session:
        first = run_transitions.escalate(session, run_id, expected="running", reason="r")
    _force(Run, run_id, "running")
    with session_scope() as session:
        second = run_transitions.escalate(session, run_id, expected="running", reason="r")
    assert first is not None and second is None
    with session_scope() as session:
        rows = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
    assert len(rows) == 1


def test_cancelling_a_waiting_run_withdraws_its_claimed_escalation(
    make_run: Callable[..., int],
) -> None:
    run_id = make_run([NOOP], start=False)
    with session_scope() as session:
        esc = run_transitions.escalate(session, run_id, expected="running", reason="r")
        assert esc is not None
        transitions.claim_escalation(session, esc.id or 0, reviewer="absent")
    with session_scope() as session:
        transitions.cancel_run(session, run_id)
    decided = _snapshot(Escalation, esc.id or 0)
    assert (decided["status"], decided["decision"]) == ("decided", "withdrawn")
    assert (decided["decided_by"], decided["comment"]) == ("agentq", "the run was cancelled")
    with session_scope() as session, pytest.raises(IllegalTransition):
        transitions.decide_escalation(session, esc.id or 0, decision="approve", reviewer="absent")


def test_json_columns_keep_in_place_edits_and_timestamps_are_aware(
    make_run: Callable[..., int],
) -> None:
    run_id = make_run([NOOP], start=False)
    (step,) = run_steps(run_id)
    with session_scope() as session:
        row = session.get(Step, step.id)
        assert row is not None
        row.args["added"] = [1, 2]
    with session_scope() as session:
        row = session.get(Step, step.id)
        assert row is not None and row.args == {"added": [1, 2]}
        run = session.get(Run, run_id)
        assert run is not None and run.created_at.tzinfo is not None
        kinds = session.exec(
            select(RunEvent.kind).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        ).all()
    assert kinds[:2] == ["run.submitted", "run.running"]
