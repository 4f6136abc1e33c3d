"""Plans as graphs on the real engine (2 worker processes): parallel steps overlap, a join sees
both results, a failed branch is replanned while the other keeps its result, and the worker
that ends a step runs the next one itself, within the chain's bounds (issue 10)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.engine import fair_queue, transitions
from models.settings import get_settings
from models.tables import PlanVersion, RunEvent, StepAttempt, utcnow
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration


def sleep(name: str, seconds: float, *, after: list[str] | None = None) -> dict[str, Any]:
    step: dict[str, Any] = {"name": name, "kind": "tool", "tool": "sleep"}
    step["args"] = {"seconds": seconds}
    if after is not None:
        step["after"] = after
    return step


def echo(name: str, value: Any, *, after: list[str]) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": "echo", "args": {"value": value}, "after": after}


def attempts_of(step_ids: list[int]) -> list[StepAttempt]:
    with session_scope() as session:
        stmt = select(StepAttempt).where(col(StepAttempt.step_id).in_(step_ids))
        return list(session.exec(stmt.order_by(col(StepAttempt.id))))


def kinds_by_step(run_id: int) -> dict[int, list[str]]:
    with session_scope() as session:
        events = session.exec(
            select(RunEvent).where(RunEvent.run_id == run_id).order_by(col(RunEvent.id))
        ).all()
    found: dict[int, list[str]] = {}
    for event in events:
        if event.step_id is not None:
            found.setdefault(event.step_id, []).append(event.kind)
    return found


def test_parallel_steps_overlap_on_two_workers_and_the_join_sees_both(make_run: Any) -> None:
    run_id = make_run(
        [
            sleep("left", 1.0, after=[]),
            sleep("right", 1.0, after=[]),
            echo("join", ["${steps.left.slept_s}", "${steps.right}"], after=["left", "right"]),
        ]
    )
    assert wait_for_run(run_id).status == "succeeded"
    left, right, join = run_steps(run_id)
    assert left.started_at and left.finished_at and right.started_at and right.finished_at
    assert left.started_at < right.finished_at and right.started_at < left.finished_at
    workers = {a.step_id: a.worker for a in attempts_of([left.id or 0, right.id or 0])}
    assert workers[left.id] != workers[right.id]  # two pool processes, at once
    assert join.started_at is not None
    assert join.started_at >= max(left.finished_at, right.finished_at)
    assert join.result == {"value": [1.0, {"slept_s": 1.0}]}


def test_a_failed_branch_is_replanned_while_the_other_keeps_its_result(make_run: Any) -> None:
    run_id = make_run(
        [
            sleep("slow", 1.5, after=[]),
            {"name": "bad", "kind": "tool", "tool": "always_fails", "after": []},
            echo("join", "${steps.slow.slept_s}", after=["slow", "bad"]),
        ],
        replans=1,
    )
    assert wait_for_run(run_id).status == "succeeded"
    steps = {(s.name, s.status): s for s in run_steps(run_id)}
    slow, failed = steps["slow", "succeeded"], steps["bad", "failed"]
    fixed = steps["bad", "succeeded"]
    assert [a.outcome for a in attempts_of([slow.id or 0])] == ["succeeded"]  # ran once, kept
    assert failed.finished_at and slow.finished_at and failed.finished_at < slow.finished_at
    with session_scope() as session:
        v2 = session.exec(
            select(PlanVersion).where(PlanVersion.run_id == run_id, PlanVersion.version == 2)
        ).one()
    join = steps["join", "succeeded"]
    assert v2.replaces_step_id == failed.id
    assert sorted(v2.after[str(join.id)]) == sorted([slow.id, fixed.id])  # the splice's place
    assert join.result == {"value": 1.5}


def _no_other_work_waits(timeout_s: float = 60.0) -> None:
    """Wait until no item of any user waits in the fair queue: a worker chains its run's next
    step only while no one else is owed a turn (`models.engine.fair_queue`), and earlier tests of
    this engine may leave work behind."""
    deadline = time.monotonic() + timeout_s
    while True:
        with session_scope() as session:
            item = fair_queue.next_item(session, now=utcnow())
            if item is None:
                return
            if time.monotonic() > deadline - timeout_s / 2:
                # Half the wait gone: an earlier test's run left in a state no task takes on
                # (a replan its test never let run) is cancelled, as its user would.
                transitions.cancel_run(session, item.run_id)
        assert time.monotonic() < deadline, f"other users' work still waits: {item}"
        time.sleep(0.2)


def test_a_chain_runs_in_process_and_yields_after_its_bound(make_run: Any) -> None:
    _no_other_work_waits()
    bound = get_settings().chain_max_steps
    n = bound + 5
    run_id = make_run([{"name": f"s{i}", "kind": "tool", "tool": "noop"} for i in range(n)])
    assert wait_for_run(run_id).status == "succeeded"
    steps = run_steps(run_id)
    kinds = kinds_by_step(run_id)
    sent = [i for i, s in enumerate(steps) if "step.queued" in kinds[s.id or 0]]
    assert sent[0] == 0 and len(sent) >= 2  # the first through the broker, and a yield
    for start, end in zip(sent, [*sent[1:], n], strict=True):
        assert end - start <= bound  # no task ran more than `bound` steps in a row
    in_process = [i for i in range(n) if i not in sent]
    assert in_process, "no step was claimed by the worker that ended the one before"
    workers = {a.step_id: a.worker for a in attempts_of([s.id or 0 for s in steps])}
    for i in in_process:  # claimed by the process that ended its dependency
        assert workers[steps[i].id] == workers[steps[i - 1].id]


def test_a_chain_yields_before_the_soft_time_limit(make_run: Any) -> None:
    settings = get_settings()
    room = settings.soft_time_limit_s - settings.step_time_limit_s  # 2 s in TEST_ENV
    each = room / 2.5
    run_id = make_run([sleep(f"s{i}", each) for i in range(5)])
    assert wait_for_run(run_id).status == "succeeded"
    steps = run_steps(run_id)
    kinds = kinds_by_step(run_id)
    sent = [i for i, s in enumerate(steps) if "step.queued" in kinds[s.id or 0]]
    assert len(sent) >= 2
    for start, end in zip(sent, [*sent[1:], len(steps)], strict=True):
        assert end - start <= 3  # a 4th step would start with less than `room` s left


def test_worker_killed_in_the_middle_of_a_chain_is_recovered_once(make_run: Any) -> None:
    run_id = make_run([sleep(f"s{i}", 0.6) for i in range(4)])
    target = run_steps(run_id)[2]
    deadline = time.monotonic() + 60
    while not (found := attempts_of([target.id or 0])):
        assert time.monotonic() < deadline, "the third step never started"
        time.sleep(0.05)
    os.kill(int(found[0].worker.rsplit(":", 1)[1]), signal.SIGKILL)
    run = wait_for_run(run_id, timeout_s=get_settings().lease_s + 60)
    assert run.status == "succeeded"
    steps = run_steps(run_id)
    assert [s.status for s in steps] == ["succeeded"] * 4
    for step in steps:
        outcomes = [a.outcome for a in attempts_of([step.id or 0])]
        assert outcomes.count("succeeded") == 1
    assert [a.outcome for a in attempts_of([target.id or 0])] == ["lease_expired", "succeeded"]


def test_cancel_stops_every_branch(make_run: Any) -> None:
    from models.engine import transitions

    # a and b sleep long enough that the second worker starts one while the other runs, even on
    # a loaded machine (with 1 s each, a slow start of the second let the first end alone).
    run_id = make_run(
        [
            sleep("a", 4.0, after=[]),
            sleep("b", 4.0, after=[]),
            sleep("a2", 0.1, after=["a"]),
            sleep("b2", 0.1, after=["b"]),
        ]
    )
    deadline = time.monotonic() + 30
    while sum(s.status == "running" for s in run_steps(run_id)) < 2:
        assert time.monotonic() < deadline, "the two branches never ran together"
        time.sleep(0.05)
    with session_scope() as session:
        transitions.lock_run(session, run_id)
        transitions.cancel_run(session, run_id)
    deadline = time.monotonic() + 30
    while any(s.status == "running" for s in run_steps(run_id)):  # both end meanwhile
        assert time.monotonic() < deadline, "a running step never ended"
        time.sleep(0.05)
    statuses = {s.name: s.status for s in run_steps(run_id)}
    assert statuses == {"a": "succeeded", "b": "succeeded", "a2": "cancelled", "b2": "cancelled"}
    assert attempts_of([s.id or 0 for s in run_steps(run_id) if s.name in ("a2", "b2")]) == []


def test_two_coordinators_share_the_coordinator_queue() -> None:
    from models.engine import queue
    from models.engine.queue import TASK_COORDINATE
    from models.engine.runs import submit_run
    from models.plans.plans import parse_plan
    from tests.integration.conftest import TEST_ENV, other_engine

    env = {**TEST_ENV, "AGENTQ_EMBEDDING_PROVIDER": "hash", "AGENTQ_USER_MAX_RUNNING_STEPS": "0"}
    with other_engine(env, worker_concurrency=2, coordinators=2) as stack:
        steps = [sleep("a", 0.0, after=[]), sleep("b", 0.0, after=[])]
        plan = parse_plan({"steps": steps}, tools=["sleep"])
        run_ids = []
        for i in range(30):
            with session_scope() as session:
                run = submit_run(
                    session, settings=get_settings(), user_id=f"u{i}", goal="two", plan=plan
                )
                run_ids.append(run.id or 0)
            queue.send(TASK_COORDINATE, run.id)
        for run_id in run_ids:
            assert wait_for_run(run_id).status == "succeeded"
        for name in ("scheduler", "coordinator-2"):
            log = stack.log_path(name).read_text()
            assert "coordinate" in log and "action=" in log, f"{name} decided nothing"


def test_an_edit_replaces_every_failed_branch_at_once(make_run: Any) -> None:
    from models.engine import queue
    from models.engine.queue import TASK_COORDINATE
    from models.plans.tools import configured_tool_names
    from models.review import reviews
    from models.tables import Escalation

    fails = [{"name": f"f{i}", "kind": "tool", "tool": "always_fails", "after": []} for i in (0, 1)]
    run_id = make_run([*fails, echo("j", 1, after=["f0", "f1"])], replans=0)
    assert wait_for_run(run_id).status == "waiting_review"
    deadline = time.monotonic() + 30
    while sum(s.status == "failed" for s in run_steps(run_id)) < 2:  # the other branch ends too
        assert time.monotonic() < deadline, "the second branch never failed"
        time.sleep(0.05)
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
        fixed = {"name": "g", "kind": "tool", "tool": "noop", "after": []}
        plan = {"steps": [fixed, echo("j", "${steps.g.ok}", after=["g"])]}
        reviews.edit(
            session,
            esc.id or 0,
            reviewer="rita",
            plan=plan,
            tools=configured_tool_names(),
            max_attempts=3,
        )
    queue.send(TASK_COORDINATE, run_id)
    assert wait_for_run(run_id).status == "succeeded"
    with session_scope() as session:
        escalations = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
    assert len(escalations) == 1  # the other failed branch did not escalate again
    done = {(s.name, s.status) for s in run_steps(run_id)}
    assert {("g", "succeeded"), ("j", "succeeded")} <= done
