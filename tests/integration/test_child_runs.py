"""Steps that are goals of their own (issue 32, item 3), on the real stack: a step of kind `run`
submits a child run and ends with its answer, the child's spend charged to the parent; the parent
resumes once however often it is told, and also when the child's news was lost (the reconciler);
cancelling the parent cancels the child; a child's escalation waits as its own; depth and fan-out
are bounded by settings."""

from __future__ import annotations

import os
import re
import signal
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlmodel import col, select

from models.db import session_scope
from models.engine import child_runs, children, lineage, queue
from models.engine.child_runs import ChildRunRefused
from models.engine.children import RunChild
from models.engine.queue import TASK_COORDINATE
from models.engine.runs import pinned_facts
from models.front import commands
from models.memory import procedure_admin
from models.memory.procedures import Actor
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent, Step, StepAttempt, utcnow
from scheduler import tasks
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
GOAL = "Summarise the expense policy"


def _user() -> str:
    return f"parent-{uuid.uuid4().hex[:8]}"


def _delegating(marker_file: Path) -> list[dict[str, Any]]:
    """a (a currency), then `delegate` (a child run told it), then `mark` (an effect, counted)."""
    return [
        {"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "EUR"}},
        {
            "name": "delegate",
            "kind": "run",
            "instruction": GOAL,
            "args": {"facts": {"currency": "${steps.a.value}"}},
        },
        {
            "name": "mark",
            "kind": "tool",
            "tool": "append_marker",
            "args": {"path": str(marker_file), "marker": "${steps.delegate.answer}"},
        },
    ]


def _child_of(parent: int) -> Run:
    with session_scope() as session:
        link = session.exec(select(RunChild).where(RunChild.parent_run_id == parent)).one()
        child = session.get(Run, link.run_id)
        assert child is not None
        return child


def test_a_step_of_kind_run_ends_with_its_child_runs_answer(
    make_run: MakeRun, marker_file: Path
) -> None:
    parent = make_run(_delegating(marker_file), user=_user())
    done = wait_for_run(parent)
    assert done.status == "succeeded", _told(parent)
    child = _child_of(parent)
    assert (child.status, child.user_id, child.goal) == ("succeeded", done.user_id, GOAL)
    with session_scope() as session:
        assert pinned_facts(session, child.id or 0)["currency"] == "EUR"
    answer = (child.final_result or {})["answer"]
    delegate = {s.name: s for s in run_steps(parent)}["delegate"]
    assert delegate.result == {"answer": answer, "run_id": child.id}
    # the child's spend to its end is the parent's too (its memory's, after it, is its own)
    assert 0 < delegate.tokens_used <= child.tokens_used
    assert done.tokens_used >= delegate.tokens_used
    assert marker_file.read_text().splitlines() == [str(answer)]
    for _ in range(2):  # told again: the step ended once, and nothing after it runs again
        queue.send(TASK_COORDINATE, parent)
    wait_for_run(parent)
    with session_scope() as session:
        ends = session.exec(
            select(RunEvent).where(RunEvent.run_id == parent, RunEvent.kind == "step.succeeded")
        ).all()
    assert [e.step_id for e in ends].count(delegate.id) == 1
    assert marker_file.read_text().splitlines() == [str(answer)]


def test_a_parent_whose_childs_news_was_lost_is_resumed_by_the_reconciler(
    make_run: MakeRun, marker_file: Path
) -> None:
    """The child ends while its parent is never told (its coordinate message lost): the
    reconciler's nudge of the quiet running parent ends the step, once."""
    parent = make_run(_delegating(marker_file), user=_user(), start=False)
    with session_scope() as session:
        steps = run_steps(parent)
        child = make_run(
            [{"name": "only", "kind": "tool", "tool": "echo", "args": {"value": 7}}],
            user=_user(),
            start=False,
        )
        long_ago = utcnow() - timedelta(seconds=get_settings().phase_stale_s + 60)
        ids = {"a": steps[0].id, "delegate": steps[1].id, "child": child, "parent": parent}
        for statement in (
            "UPDATE steps SET status = 'waiting_child' WHERE id = :delegate",
            "UPDATE steps SET status = 'succeeded', result = '{\"value\": \"EUR\"}' WHERE id = :a",
            "UPDATE runs SET status = 'succeeded', final_result = '{\"answer\": \"done\"}', "
            "tokens_used = 5 WHERE id = :child",
            "UPDATE runs SET status = 'running', updated_at = :long_ago WHERE id = :parent",
        ):
            session.execute(sa.text(statement), {**ids, "long_ago": long_ago})
        session.add(
            RunChild(run_id=child, parent_run_id=parent, parent_step_id=steps[1].id or 0, depth=1)
        )
    tasks.reconcile()
    done = wait_for_run(parent)
    assert done.status == "succeeded", done.error
    assert {s.name: s.result for s in run_steps(parent)}["delegate"] == {
        "answer": "done",
        "run_id": child,
    }
    assert done.tokens_used >= 5
    assert marker_file.read_text().splitlines() == ["done"]


def test_cancelling_a_parent_cancels_its_child_waiting_for_review(make_run: MakeRun) -> None:
    """A parent with almost no tokens: its child gets what is left, escalates for it and waits
    for a reviewer as its own run, shown with its parent; cancelling the parent cancels the
    child, withdraws its escalation, and charges what the child spent to the parent's step."""
    steps = [{"name": "delegate", "kind": "run", "instruction": GOAL}]
    parent = make_run(steps, user=_user(), tokens=5)
    child = wait_for_child(parent)
    assert wait_for_run(child.id or 0, ("waiting_review",)).status == "waiting_review"
    assert child.tokens_limit == 5  # what the parent had left
    (step,) = run_steps(parent)
    assert step.status == "waiting_child"
    with session_scope() as session:  # what it spent before it escalated, say
        session.execute(sa.text("UPDATE runs SET tokens_used = 7 WHERE id = :id"), {"id": child.id})
    commands.cancel(parent)
    with session_scope() as session:
        assert children.parent_of(session, child.id or 0) == parent
        assert session.get(Run, child.id).status == "cancelled"  # type: ignore[union-attr]
        esc = session.exec(select(Escalation).where(Escalation.run_id == child.id)).one()
        assert esc.decision == "withdrawn"
        assert session.get(Run, parent).tokens_used == 7  # type: ignore[union-attr]
    (step,) = run_steps(parent)
    assert (step.status, step.tokens_used) == ("failed", 7)  # ended with its child, charged


def _told(run_id: int) -> str:
    """What a run and its child runs came to, for a failure's message."""
    with session_scope() as session:
        ids = [run_id, *(i for i, _ in lineage.read(session, run_id).children)]
        said = []
        for i in ids:
            run = session.get(Run, i)
            steps = session.exec(select(Step).where(Step.run_id == i)).all()
            escs = session.exec(select(Escalation).where(Escalation.run_id == i)).all()
            said.append(
                f"run {i} {run.status if run else None} {run.error if run else None}: "
                f"steps {[(s.name, s.kind, s.status, s.error) for s in steps]} "
                f"escalations {[(e.reason, e.detail) for e in escs]}"
            )
    return "\n".join(said)


def wait_for_child(parent: int, timeout_s: float = 60) -> Run:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            link = session.exec(select(RunChild).where(RunChild.parent_run_id == parent)).first()
            if link is not None:
                found = session.get(Run, link.run_id)
                assert found is not None
                return found
        time.sleep(0.2)
    pytest.fail(f"run {parent} started no child run in {timeout_s} s")


@pytest.mark.parametrize(
    ("bounds", "says"),
    [
        ({"child_run_max_depth": 0}, "over AGENTQ_CHILD_RUN_MAX_DEPTH (0)"),
        ({"child_runs_max": 0}, "the most AGENTQ_CHILD_RUNS_MAX allows"),
    ],
)
def test_depth_and_fan_out_are_bounded(
    make_run: MakeRun, bounds: dict[str, int], says: str
) -> None:
    steps = [{"name": "delegate", "kind": "run", "instruction": GOAL}]
    parent = make_run(steps, user=_user(), start=False)
    settings = get_settings().model_copy(update=bounds)
    with session_scope() as session:
        run = session.get(Run, parent)
        step = session.exec(select(Step).where(Step.run_id == parent)).one()
        assert run is not None
        with pytest.raises(ChildRunRefused, match=re.escape(says)):
            child_runs.start(session, run, step, facts={}, settings=settings)
        made = select(col(RunChild.run_id)).where(RunChild.parent_run_id == parent)
        assert session.exec(made).all() == []


def test_a_child_killed_mid_step_is_recovered_and_its_parent_resumes_once(
    make_run: MakeRun, marker_file: Path
) -> None:
    """The child's plan (the user's procedure for its goal, adopted by its planner) sleeps; the
    pool process running that step is killed: the step runs again once its lease runs out, the
    child succeeds, and the parent's step ends once, the effect after it written once."""
    user = _user()
    title = f"Nap {uuid.uuid4().hex[:6]} briefly"
    nap = {"name": "nap", "kind": "tool", "tool": "sleep", "args": {"seconds": 3}}
    owner = Actor(f"token:{user}", "submitter", user)
    body = {"title": title, "when_to_use": title, "plan_template": {"steps": [nap]}}
    procedure = procedure_admin.add(owner, body)
    try:
        mark = {"path": str(marker_file), "marker": "after"}
        after = {"name": "mark", "kind": "tool", "tool": "append_marker", "args": mark}
        parent = make_run(
            [{"name": "delegate", "kind": "run", "instruction": title}, after], user=user
        )
        child = wait_for_child(parent)
        attempts = _attempts_of(child.id or 0, "nap")
        pid = int(attempts[0].worker.rsplit(":", 1)[1])
        assert pid != os.getpid()
        os.kill(pid, signal.SIGKILL)  # mid-sleep: its lease is no longer renewed
        done = wait_for_run(parent, timeout_s=90)
        assert done.status == "succeeded", _told(parent)
        outcomes = [a.outcome for a in _attempts_of(child.id or 0, "nap")]
        assert outcomes == ["lease_expired", "succeeded"]
        assert marker_file.read_text().splitlines() == ["after"]
        (ran, _) = run_steps(parent)
        with session_scope() as session:
            ends = session.exec(
                select(RunEvent).where(
                    RunEvent.step_id == ran.id, RunEvent.kind == "step.succeeded"
                )
            ).all()
        assert len(ends) == 1
    finally:
        procedure_admin.remove(owner, procedure.id or 0)


def _attempts_of(run_id: int, name: str, timeout_s: float = 60) -> list[StepAttempt]:
    """The attempts of run `run_id`'s step `name`, once it has one (waits for it)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            found = session.exec(
                select(StepAttempt)
                .join(Step, col(Step.id) == StepAttempt.step_id)
                .where(Step.run_id == run_id, Step.name == name)
                .order_by(col(StepAttempt.attempt))
            ).all()
            if found:
                return list(found)
        time.sleep(0.05)
    pytest.fail(f"run {run_id}'s step {name!r} never started: {_told(run_id)}")
