"""A submit makes its run's first decision itself (`models.engine.submissions`), and what a broker
that was down lost of its messages is recovered by the engine's own reconciler (its beat runs
every second here: TEST_ENV)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Callable, Iterator

import pytest
import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.db import session_scope
from models.engine import queue, submissions
from models.engine.queue import TASK_EXECUTE_STEP, TASK_PLAN
from models.engine.submissions import RunRequest
from models.errors import InvalidInput
from models.memory import memory_admin
from models.plans.plans import parse_plan
from models.settings import get_settings
from models.tables import Run, RunEvent, Step
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, run_steps, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
Sent = list[tuple[str, tuple[int, ...]]]
QUEUED_STALE_S = float(TEST_ENV["AGENTQ_QUEUED_STALE_S"])
PHASE_STALE_S = float(TEST_ENV["AGENTQ_PHASE_STALE_S"])
DOWN_BROKER = "redis://127.0.0.1:1/0"  # nothing listens on port 1: refused at once


def _user(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _noop(name: str, *after: str) -> dict[str, object]:
    return {"name": name, "kind": "tool", "tool": "noop", "after": list(after)}


def _statuses(session: Session, run: Run) -> dict[str, str]:
    """What the submit transaction left: the run's status and each step's, by name."""
    steps = session.exec(select(Step).where(Step.run_id == run.id)).all()
    return {"run": run.status, **{s.name: s.status for s in steps}}


def _event_at(run_id: int, kind: str, nth: int = 0) -> float:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        events = session.exec(stmt.order_by(col(RunEvent.id))).all()
    assert len(events) > nth, f"run {run_id}: no {kind} event #{nth}"
    return events[nth].at.timestamp()


@pytest.fixture
def sent(engine: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Sent:
    """Every message this process sends (still sent), in order."""
    log: Sent = []
    send = queue.try_send

    def spy(task: str, *args: int) -> bool:
        log.append((task, args))
        return send(task, *args)

    monkeypatch.setattr(queue, "try_send", spy)
    return log


@pytest.fixture
def broker_down(engine: LocalStack, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process's broker cannot be reached (the engine's processes still reach theirs)."""
    monkeypatch.setenv("AGENTQ_BROKER_URL", DOWN_BROKER)
    monkeypatch.setitem(queue._client, os.getpid(), queue.make_celery("down"))
    yield


STEP_TAKEN = ("chain.step", "wakeup.step")  # a step taken for another's sake (wakeups.py)


def _taken_in_fair_order(stack: LocalStack, events: tuple[str, ...], key: str, value: int) -> bool:
    """Whether a worker took this item from Postgres in fair order, for another item's sake (its
    log's `events` with `key=value`): a worker that ends a step, or wakes for a message, takes
    the fair-next waiting item of any run, message or none (`worker.execution.wakeups`), so an
    earlier test's work still under way may run it before the reconciler re-sends it."""
    either = "|".join(map(re.escape, events))
    pattern = re.compile(rf"(?:{either})\b.*\b{key}={value}\b")
    return any(pattern.search(line) for line in stack.log_path("worker").read_text().splitlines())


def test_an_explicit_plans_first_steps_are_queued_by_its_submit(sent: Sent) -> None:
    plan = parse_plan({"steps": [_noop("a"), _noop("b"), _noop("join", "a", "b")]}, tools=["noop"])
    request = RunRequest(user_id=_user("plan"), goal="submit dispatches", plan=plan)
    submitted = submissions.submit(request, settings=get_settings(), describe=_statuses)
    assert submitted.notified
    assert submitted.seen == {"run": "running", "a": "queued", "b": "queued", "join": "pending"}
    a, b, _ = run_steps(submitted.run_id)
    assert sent == [(TASK_EXECUTE_STEP, (a.id,)), (TASK_EXECUTE_STEP, (b.id,))]  # no coordinate
    assert wait_for_run(submitted.run_id).status == "succeeded"


@pytest.mark.parametrize("user_id", ["u" * 201, " "])
def test_a_user_id_no_user_can_have_is_refused_before_anything_is_written(
    engine: LocalStack, user_id: str
) -> None:
    """Checked before the fair queue's row of that user is written (a 201-character id once
    reached Postgres: `value too long for type character varying(200)`)."""
    with session_scope() as session:
        before = session.scalar(sa.text("SELECT count(*) FROM user_service"))
    request = RunRequest(user_id=user_id, goal="refused", plan=None)
    with pytest.raises(
        InvalidInput, match=rf"^user: must be 1 to 200 characters \(got {len(user_id)}\)$"
    ):
        submissions.submit(request, settings=get_settings())
    with pytest.raises(InvalidInput, match=r"^user: must be 1 to 200 characters"):
        memory_admin.forget(user_id)
    with session_scope() as session:
        assert session.scalar(sa.text("SELECT count(*) FROM user_service")) == before
        assert session.scalar(sa.text("SELECT count(*) FROM runs WHERE goal = 'refused'")) == 0


def _step_rows(session: Session, run: Run) -> list[tuple[object, ...]]:
    """The run's steps as stored, in the version's order, with its `after` of each."""
    rows = session.execute(
        sa.text(
            "SELECT s.id, s.position, s.name, s.kind, s.tool, s.args, s.tools, s.expect, "
            "jsonb_typeof(s.output) AS output_type, s.output, s.status, s.attempt, "
            "s.max_attempts, s.deferrals, s.plan_version, v.step_ids, v.after "
            "FROM steps s JOIN plan_versions v ON v.run_id = s.run_id AND v.version = 1 "
            "WHERE s.run_id = :run_id ORDER BY s.position"
        ),
        {"run_id": run.id},
    )
    return [tuple(row) for row in rows]


def test_a_plan_versions_steps_are_written_whole_in_its_order(sent: Sent) -> None:
    """The new steps of a version are one statement (`models.plans.plan_writes.INSERT_STEPS`):
    every column as the plan gave it, positions in the version's order, ids in its graph, and
    no `output` stored as JSON null, as the ORM wrote it."""
    plan = parse_plan(
        {
            "steps": [
                {"name": "m", "kind": "model", "instruction": "sum", "output": {"total": "number"}},
                {**_noop("b", "m"), "expect": [{"key": "value", "present": True}]},
                {"name": "e", "kind": "tool", "tool": "echo", "args": {"value": "v"}, "after": []},
            ]
        },
        tools=["noop", "echo"],
    )
    request = RunRequest(user_id=_user("rows"), goal="rows as written", plan=plan)
    submitted = submissions.submit(request, settings=get_settings(), describe=_step_rows)
    rows = submitted.seen
    ids = [row[0] for row in rows]
    assert [row[1:5] for row in rows] == [
        (0, "m", "model", None),
        (1, "b", "tool", "noop"),
        (2, "e", "tool", "echo"),
    ]
    assert [row[5] for row in rows] == [{}, {}, {"value": "v"}]
    assert rows[1][7] == [{"key": "value", "present": True}] and rows[0][7] == rows[2][7] == []
    assert [row[8] for row in rows] == ["object", "null", "null"]
    assert rows[0][9] == {"total": "number"}
    attempts = get_settings().step_max_attempts
    assert all(row[11:15] == (0, attempts, 0, 1) for row in rows)
    step_ids, after = rows[0][15], rows[0][16]
    assert step_ids == ids and after == {str(ids[0]): [], str(ids[1]): [ids[0]], str(ids[2]): []}
    wait_for_run(submitted.run_id)  # its model step fails and is replanned: none left running


def test_a_goal_alone_is_sent_to_planning_by_its_submit(sent: Sent) -> None:
    request = RunRequest(user_id=_user("goal"), goal="say hello")
    submitted = submissions.submit(request, settings=get_settings(), describe=_statuses)
    assert submitted.notified and submitted.seen == {"run": "planning"}
    assert sent == [(TASK_PLAN, (submitted.run_id,))]
    run = wait_for_run(submitted.run_id)
    assert run.status in ("succeeded", "waiting_review") and run.plan_version >= 1


def test_a_first_step_whose_message_was_lost_is_sent_by_the_reconciler(
    broker_down: None, engine: LocalStack
) -> None:
    plan = parse_plan({"steps": [_noop("only")]}, tools=["noop"])
    request = RunRequest(user_id=_user("lost-step"), goal="broker down", plan=plan)
    submitted = submissions.submit(request, settings=get_settings(), describe=_statuses)
    assert not submitted.notified  # said, not raised: the rows are committed
    assert submitted.seen == {"run": "running", "only": "queued"}
    run_id = submitted.run_id
    assert wait_for_run(run_id, timeout_s=60).status == "succeeded"
    (step,) = run_steps(run_id)
    waited = _event_at(run_id, "step.running") - _event_at(run_id, "step.queued")
    # nobody sent it until it was stale, unless a worker took it from Postgres in fair order
    assert waited >= QUEUED_STALE_S or _taken_in_fair_order(engine, STEP_TAKEN, "step_id", step.id)
    assert step.attempt == 1


def test_a_plan_task_whose_message_was_lost_is_sent_by_the_reconciler(
    broker_down: None, engine: LocalStack
) -> None:
    request = RunRequest(user_id=_user("lost-plan"), goal="say hello")
    submitted = submissions.submit(request, settings=get_settings(), describe=_statuses)
    assert not submitted.notified and submitted.seen == {"run": "planning"}
    run_id = submitted.run_id
    run = wait_for_run(run_id, timeout_s=90)
    assert run.status in ("succeeded", "waiting_review") and run.plan_version >= 1
    waited = _event_at(run_id, "run.running") - _event_at(run_id, "run.planning")
    # quiet in `planning` until the reconciler sent `agentq.plan`, or a worker took it in fair order
    taken = _taken_in_fair_order(engine, ("wakeup.phase",), "run_id", run_id)
    assert waited >= PHASE_STALE_S or taken


def test_a_queued_run_nobody_dispatched_is_planned_by_the_reconciler(make_run: MakeRun) -> None:
    """A run left `queued` with no message out (inserted only, as a run held at a full cap whose
    freeing dispatch was lost): the reconciler coordinates it, and its dispatch plans it."""
    run_id = make_run(None, user=_user("held"), goal="say hello", start=False)
    run = wait_for_run(run_id, timeout_s=90)
    assert run.status in ("succeeded", "waiting_review") and run.plan_version >= 1
    waited = _event_at(run_id, "run.planning") - _event_at(run_id, "run.submitted")
    assert waited >= PHASE_STALE_S
