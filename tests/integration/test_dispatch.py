"""Fair dispatch on the real engine (2 worker processes, AGENTQ_USER_MAX_RUNNING_STEPS 4, its
default): the per-user cap holds, held work runs once, another user's step overtakes a backlog,
a cancel drops held steps, and the reconciler dispatches after a lost coordinate.

Every check reads the order of rows and events (`tests.support.fairness`), never a duration.
The engine is this module's own, with `hash` embeddings: a run's synthesis remembers it, and
loading the local embedding model in each worker process can outlast TEST_ENV's 10 s soft time
limit on a loaded 2-core machine, which is not what these tests are about.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, step_transitions, submissions, transitions
from models.engine.queue import TASK_EXECUTE_STEP
from models.engine.runs import submit_run
from models.engine.submissions import RunRequest, insert_and_decide
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import Run, Step, StepAttempt
from ops.stack import LocalStack
from scheduler import tasks
from tests.integration.conftest import TEST_ENV, other_engine, run_steps, wait_for_run
from tests.support.fairness import (
    first_event,
    held_slots,
    most_at_once,
    new_user,
    sleeps,
    user_events,
    user_steps,
    wait_until,
)

pytestmark = pytest.mark.integration
CAP = 4
Submit = Callable[..., int]


@pytest.fixture(scope="module")
def fair_engine() -> Iterator[LocalStack]:
    env = {
        **TEST_ENV,
        "AGENTQ_EMBEDDING_PROVIDER": "hash",
        "AGENTQ_USER_MAX_RUNNING_STEPS": str(CAP),
    }
    with other_engine(env, worker_concurrency=2) as stack:
        yield stack


@pytest.fixture
def submit(fair_engine: LocalStack) -> Submit:
    """`submit(steps | None, user=..., start=True)`: a run's id, submitted as users' runs are
    (`models.engine.submissions.submit`), or with `start=False` only inserted (`submit_run`),
    nothing decided or sent. Submit quotas are off here (tested in tests/api/test_quotas.py)."""
    settings = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )

    def make(
        steps: list[dict[str, Any]] | None, *, user: str, goal: str = "fair", start: bool = True
    ) -> int:
        plan = None if steps is None else parse_plan({"steps": steps}, tools=["sleep"])
        if start:
            request = RunRequest(user_id=user, goal=goal, plan=plan)
            return submissions.submit(request, settings=settings).run_id
        with session_scope() as session:
            run = submit_run(session, settings=settings, user_id=user, goal=goal, plan=plan)
            return run.id or 0

    return make


def _count(user_id: str, status: str) -> int:
    with session_scope() as session:
        return sum(1 for s in user_steps(session, user_id) if s.status == status)


def test_the_cap_holds_and_every_held_step_runs_once(submit: Submit) -> None:
    user = new_user("cap")
    run_ids = [submit(sleeps(3, 0.2), user=user) for _ in range(6)]
    for run_id in run_ids:
        assert wait_for_run(run_id).status == "succeeded"
    with session_scope() as session:
        events = user_events(session, user)
        steps = user_steps(session, user)
        attempts = session.exec(
            select(StepAttempt).where(col(StepAttempt.step_id).in_([s.id for s in steps]))
        ).all()
    held = held_slots(events)
    assert len(held) == 18 and most_at_once(held) == CAP  # reached, never passed
    assert sorted(a.step_id for a in attempts) == sorted(s.id for s in steps)  # once each
    sent = [s for s in steps if any(e.kind == "step.queued" and e.step_id == s.id for e in events)]
    assert len(sent) >= len(run_ids)  # each run's first step; the rest may follow in-process
    for step in sent:  # each waited as `ready` in Postgres before it was sent
        ready = first_event(events, "step.ready", step.id or 0)
        assert ready <= first_event(events, "step.queued", step.id or 0)
    waited = [
        s
        for s in sent
        if first_event(events, "step.queued", s.id or 0)
        > first_event(events, "step.ready", s.id or 0)
    ]
    assert waited, "no step was ever held: the cap was never what stopped one"


def test_plan_tasks_take_slots_too(submit: Submit) -> None:
    user = new_user("plans")
    run_ids = [submit(None, user=user, goal=f"answer question {i}") for i in range(7)]
    for run_id in run_ids:
        assert wait_for_run(run_id).status == "succeeded"
    with session_scope() as session:
        held = held_slots(user_events(session, user))
    plans = [h for h in held if h.step_id is None]
    assert len(plans) == 7
    assert most_at_once(held) <= CAP  # plan tasks and steps together


def test_another_users_step_overtakes_a_backlog(submit: Submit) -> None:
    busy, other = new_user("backlog"), new_user("other")
    busy_runs = [submit(sleeps(2, 0.3), user=busy) for _ in range(12)]
    wait_until(lambda: _count(busy, "ready") >= 4, "the busy user has a backlog")
    other_run = submit(sleeps(1, 0.0), user=other)
    assert wait_for_run(other_run).status == "succeeded"
    for run_id in busy_runs:
        assert wait_for_run(run_id).status == "succeeded"
    (step,) = run_steps(other_run)
    with session_scope() as session:
        busy_events = user_events(session, busy)
        events = user_events(session, other)
        busy_steps = user_steps(session, busy)
    sent = first_event(events, "step.queued", step.id or 0)
    started = first_event(events, "step.running", step.id or 0)
    ahead = [h for h in held_slots(busy_events) if h.start < sent < h.end]
    assert len(ahead) <= CAP  # in the broker or running ahead of it: at most the cap
    readied = {e.step_id for e in busy_events if e.kind == "step.ready"}
    held_back = [s for s in busy_steps if s.id in readied]  # the others followed in-process
    overtaken = [
        s
        for s in held_back
        if first_event(busy_events, "step.ready", s.id or 0) < sent
        and first_event(busy_events, "step.queued", s.id or 0) > sent
    ]
    assert overtaken, "the busy user had no backlog left when the other's step was sent"
    assert all(first_event(busy_events, "step.running", s.id or 0) > started for s in overtaken)


def test_cancel_cancels_held_steps(submit: Submit) -> None:
    user = new_user("cancel")
    run_ids = [submit(sleeps(2, 0.5), user=user) for _ in range(8)]
    wait_until(lambda: _count(user, "ready") >= 2, "held steps")
    with session_scope() as session:
        held = session.exec(
            select(Step).where(col(Step.run_id).in_(run_ids), Step.status == "ready")
        ).first()
        assert held is not None
        transitions.lock_run(session, held.run_id)
        transitions.cancel_run(session, held.run_id)
    for run_id in run_ids:
        wait_for_run(run_id, ("succeeded", "cancelled"))
    with session_scope() as session:
        step = session.get(Step, held.id)
        tries = session.exec(select(StepAttempt).where(StepAttempt.step_id == held.id)).all()
        run = session.get(Run, held.run_id)
    assert step is not None and step.status == "cancelled" and not tries
    assert run is not None and run.status == "cancelled"


def test_the_reconciler_dispatches_after_a_lost_coordinate(submit: Submit) -> None:
    user = new_user("lost")
    run_id = submit(sleeps(1, 0.0), user=user, start=False)  # no coordinate is ever sent
    (step,) = run_steps(run_id)
    stale = get_settings().queued_stale_s + 1
    with session_scope() as session:  # ready, as a coordinator leaves it; its dispatch lost
        step_transitions.ready_step(session, step.id or 0)
        row = session.get(Step, step.id)
        assert row is not None
        row.queued_at = row.queued_at - timedelta(seconds=stale) if row.queued_at else None
    tasks.reconcile()  # as the beat does; the engine's own beat may get there first
    wait_until(lambda: _count(user, "ready") == 0, "the ready step was dispatched", 5)
    assert wait_for_run(run_id).status == "succeeded"
    assert [s.status for s in run_steps(run_id)] == ["succeeded"]


def test_the_cap_holds_at_submit(fair_engine: LocalStack) -> None:
    """A submit dispatches under the cap as the coordinator did: a plan of six independent
    steps gets four slots and waits with two `ready`; the user's next runs, with no slot left,
    stay held (`ready`, `queued`) and send nothing; every one runs once its turn comes."""
    user = new_user("at-submit")
    settings = get_settings().model_copy(
        update={"user_max_active_runs": 0, "user_submits_per_minute": 0}
    )
    wide = parse_plan(
        {"steps": [{**s, "after": []} for s in sleeps(CAP + 2, 1.5)]}, tools=["sleep"]
    )
    one = parse_plan({"steps": sleeps(1, 0.0)}, tools=["sleep"])
    requests = [
        RunRequest(user_id=user, goal="wide", plan=wide),
        RunRequest(user_id=user, goal="one", plan=one),
        RunRequest(user_id=user, goal="answer question 1"),
    ]
    found: list[tuple[list[str], list[str]]] = []
    for request in requests:  # each its own submit; the first's steps run 1.5 s: no slot frees
        with session_scope() as session:
            run, sends = insert_and_decide(session, request, settings=settings)
            steps = session.exec(select(Step).where(Step.run_id == run.id)).all()
            found.append(([run.status, *sorted(s.status for s in steps)], [t for t, _ in sends]))
        assert queue.send_all(sends)
    assert found == [
        (["running", *["queued"] * CAP, "ready", "ready"], [TASK_EXECUTE_STEP] * CAP),
        (["running", "ready"], []),
        (["queued"], []),
    ]
    with session_scope() as session:
        run_ids = session.exec(select(Run.id).where(Run.user_id == user)).all()
    for run_id in run_ids:
        assert wait_for_run(run_id or 0).status in ("succeeded", "waiting_review")
    with session_scope() as session:
        held = held_slots(user_events(session, user))
    assert most_at_once(held) == CAP  # reached at submit, never passed
