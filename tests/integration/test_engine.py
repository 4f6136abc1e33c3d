"""The plan engine end to end on real Postgres, a broker and Celery worker processes.

Every test runs on each broker of the matrix (tests/support/brokers.py): the embedded Redis, and
RabbitMQ and an external Redis when `AGENTQ_TEST_AMQP_URL` / `AGENTQ_TEST_REDIS_URL` are set.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue, step_transitions
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import IllegalTransition
from models.review import reviews
from models.settings import get_settings
from models.tables import Escalation, PlanVersion, RunEvent, StepAttempt
from ops.stack import LocalStack
from tests.integration.conftest import run_steps, wait_for_run
from tests.support.brokers import broker_params, engine_on

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]


@pytest.fixture(scope="module", autouse=True, params=broker_params())
def broker(request: pytest.FixtureRequest, engine: LocalStack) -> Iterator[str | None]:
    """The broker URL these tests run on (None: the session engine's embedded Redis)."""
    with engine_on(request.param):
        yield request.param


def _noop(name: str) -> dict[str, object]:
    return {"name": name, "kind": "tool", "tool": "noop"}


def _marker(name: str, path: Path) -> dict[str, object]:
    return {
        "name": name,
        "kind": "tool",
        "tool": "append_marker",
        "args": {"path": str(path), "marker": name},
    }


def _attempts(step_id: int) -> list[StepAttempt]:
    with session_scope() as session:
        stmt = select(StepAttempt).where(StepAttempt.step_id == step_id)
        return list(session.exec(stmt.order_by(col(StepAttempt.attempt))))


def _escalations(run_id: int) -> list[Escalation]:
    with session_scope() as session:
        return list(session.exec(select(Escalation).where(Escalation.run_id == run_id)))


def test_five_step_plan_completes(make_run: MakeRun) -> None:
    run_id = make_run([_noop(f"s{i}") for i in range(1, 6)])
    run = wait_for_run(run_id)
    assert run.status == "succeeded"
    steps = run_steps(run_id)
    assert [s.name for s in steps] == ["s1", "s2", "s3", "s4", "s5"]
    assert all(s.status == "succeeded" and s.attempt == 1 for s in steps)
    assert [s.position for s in steps] == [0, 1, 2, 3, 4]
    assert run.final_result is not None
    assert run.final_result["outputs"] == {f"s{i}": {"ok": True} for i in range(1, 6)}
    assert run.final_result["offline"] is True
    # steps ran in plan order: each started after the one before it finished
    for before, after in itertools.pairwise(steps):
        assert before.finished_at is not None and after.started_at is not None
        assert before.finished_at <= after.started_at


def test_failed_step_is_replanned_and_run_completes(make_run: MakeRun) -> None:
    run_id = make_run(
        [_noop("a"), {"name": "b", "kind": "tool", "tool": "always_fails"}, _noop("c")],
        replans=1,
    )
    run = wait_for_run(run_id)
    assert run.status == "succeeded"
    assert (run.replans_used, run.plan_version) == (1, 2)
    steps = run_steps(run_id)
    assert [(s.name, s.tool, s.status) for s in steps] == [
        ("a", "noop", "succeeded"),
        ("b", "always_fails", "failed"),
        ("c", "noop", "succeeded"),
        ("b", "noop", "succeeded"),  # the fallback, spliced in by the replan
    ]
    with session_scope() as session:
        v2 = session.exec(
            select(PlanVersion).where(PlanVersion.run_id == run_id, PlanVersion.version == 2)
        ).one()
    a, failed_b, c, new_b = steps
    assert v2.step_ids == [a.id, failed_b.id, new_b.id, c.id]  # new step right after the failure
    assert v2.replaces_step_id == failed_b.id and v2.created_by == "replanner"
    assert failed_b.finished_at and new_b.started_at and c.started_at
    assert failed_b.finished_at <= new_b.started_at <= c.started_at


def test_spent_budget_escalates_once_and_approval_resumes(make_run: MakeRun) -> None:
    run_id = make_run(
        [_noop("a"), {"name": "x", "kind": "tool", "tool": "flaky", "args": {"fail_times": 1}}],
        replans=0,
    )
    run = wait_for_run(run_id)
    assert run.status == "waiting_review"
    for _ in range(3):  # more coordinator messages must not open more escalations
        queue.send(TASK_COORDINATE, run_id)
    time.sleep(1.5)
    escalations = _escalations(run_id)
    assert len(escalations) == 1
    esc = escalations[0]
    assert (esc.reason, esc.status, esc.detail["step"]) == ("replan_budget_spent", "open", "x")
    with session_scope() as session:
        reviews.approve(session, esc.id or 0, reviewer="rita", max_attempts=3)
    queue.send(TASK_COORDINATE, run_id)
    run = wait_for_run(run_id, ("succeeded", "failed"))
    assert run.status == "succeeded"
    xs = [s for s in run_steps(run_id) if s.name == "x"]
    assert [s.status for s in xs] == ["failed", "succeeded"]
    assert xs[1].result == {"ok": True, "tries": 2}
    with session_scope() as session:
        again = session.get(Escalation, esc.id)
        assert again is not None and (again.decision, again.decided_by) == ("approve", "rita")
        with pytest.raises(IllegalTransition, match="decided"):
            reviews.approve(session, esc.id or 0, reviewer="rita", max_attempts=3)
    assert len(_escalations(run_id)) == 1


def test_duplicate_step_message_applies_its_effect_once(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id = make_run([_marker("once", marker_file)], start=False)
    (step,) = run_steps(run_id)
    with session_scope() as session:
        step_transitions.ready_step(session, step.id or 0)
        step_transitions.enqueue_step(session, step.id or 0)
    for _ in range(3):  # the broker delivers the same step three times, concurrently
        queue.send(TASK_EXECUTE_STEP, step.id)
    queue.send(TASK_COORDINATE, run_id)
    run = wait_for_run(run_id)
    assert run.status == "succeeded"
    time.sleep(1.0)  # let the late duplicates finish being refused
    assert marker_file.read_text().splitlines() == ["once"]
    assert [a.attempt for a in _attempts(step.id or 0)] == [1]
    with session_scope() as session:
        events = session.exec(
            select(RunEvent.kind).where(RunEvent.run_id == run_id, RunEvent.step_id == step.id)
        ).all()
    assert events.count("step.running") == 1 and events.count("step.succeeded") == 1


def _wait_for_running(step_id: int, timeout_s: float = 30) -> StepAttempt:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        attempts = _attempts(step_id)
        if attempts:
            return attempts[0]
        time.sleep(0.1)
    pytest.fail(f"step {step_id} never started")


def test_worker_killed_mid_step_is_recovered_by_the_reconciler(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id = make_run(
        [
            _marker("before", marker_file),
            {"name": "slow", "kind": "tool", "tool": "sleep", "args": {"seconds": 3}},
            _marker("after", marker_file),
        ]
    )
    slow = next(s for s in run_steps(run_id) if s.name == "slow")
    first = _wait_for_running(slow.id or 0)
    pid = int(first.worker.rsplit(":", 1)[1])
    assert pid != os.getpid()
    os.kill(pid, signal.SIGKILL)  # the pool process dies mid-step, its lease still held
    lease_s = get_settings().lease_s
    run = wait_for_run(run_id, ("succeeded", "failed", "waiting_review"), timeout_s=lease_s + 45)
    assert run.status == "succeeded"
    attempts = _attempts(slow.id or 0)
    assert [(a.attempt, a.outcome) for a in attempts] == [(1, "lease_expired"), (2, "succeeded")]
    assert attempts[1].worker != first.worker
    steps = run_steps(run_id)
    assert [s.status for s in steps] == ["succeeded"] * 3
    assert marker_file.read_text().splitlines() == ["before", "after"]
    for step in steps:
        outcomes = [a.outcome for a in _attempts(step.id or 0)]
        assert outcomes.count("succeeded") == 1


def test_spent_wall_time_escalates_and_approval_grants_it_again(make_run: MakeRun) -> None:
    """The second sleep runs into the run's deadline and stops there
    (`worker.execution.time_limits`); the first one's result is kept, and the approval's retry of
    the second fits the new deadline."""
    nap = {"kind": "tool", "tool": "sleep", "args": {"seconds": 2}}
    run_id = make_run([{"name": "a", **nap}, {"name": "b", **nap}], wall_time_s=3)
    run = wait_for_run(run_id)
    assert run.status == "waiting_review"
    (esc,) = _escalations(run_id)
    assert esc.reason == "wall_time_budget_spent"
    a, b = run_steps(run_id)
    assert (a.status, b.status, esc.step_id) == ("succeeded", "failed", b.id)  # state kept
    with session_scope() as session:
        reviews.approve(session, esc.id or 0, reviewer="rita", max_attempts=3)
    queue.send(TASK_COORDINATE, run_id)
    run = wait_for_run(run_id, ("succeeded", "failed"))
    assert run.status == "succeeded"
    assert run.deadline_at is not None and run.finished_at is not None
    assert run.finished_at < run.deadline_at
