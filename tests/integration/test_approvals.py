"""Approvals before effects (issue 30, items 1-3; DESIGN.md, invariant 14), on the session's
engine: real Postgres, Redis and Celery workers. The gated tool is the test-only `append_marker`,
whose every run appends a line to a file, so each test counts the effects. The runs tighten the
operator's (empty) policy themselves (`approvals` at submit); the operator's policy and a model
step's gated call are in tests/integration/test_model_approvals.py."""

from __future__ import annotations

import os
import signal
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlmodel import col, select

from models.approvals.calls import ToolApproval
from models.db import session_scope
from models.engine import queue
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import Conflict, IllegalTransition, InvalidInput
from models.front import commands
from models.plans.tools import ToolContext, enabled_tool
from models.review import reviews
from models.settings import get_settings
from models.tables import Escalation, StepAttempt, utcnow
from tests.conftest import SESSION_POOL
from tests.integration.conftest import run_steps, wait_for_run
from worker.execution import approval_gates

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
ALWAYS = {"append_marker": "always"}


def _marker_step(path: Path, marker: str) -> dict[str, Any]:
    args = {"path": str(path), "marker": marker}
    return {"name": "file", "kind": "tool", "tool": "append_marker", "args": args}


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _gated(make_run: MakeRun, path: Path, *, replans: int = 0) -> tuple[int, Escalation]:
    """A run of a user of its own whose one step's call waits for approval, and its escalation."""
    user = f"appr-{uuid.uuid4().hex[:8]}"
    run_id = make_run([_marker_step(path, "paid")], user=user, replans=replans, approvals=ALWAYS)
    assert wait_for_run(run_id).status == "waiting_review"
    return run_id, _open_escalation(run_id)


def _open_escalation(run_id: int) -> Escalation:
    with session_scope() as session:
        return session.exec(
            select(Escalation).where(Escalation.run_id == run_id, Escalation.status == "open")
        ).one()


def _approval(step_id: int) -> ToolApproval:
    with session_scope() as session:
        return session.exec(select(ToolApproval).where(ToolApproval.step_id == step_id)).one()


def test_a_gated_call_waits_holding_no_worker_and_runs_once_when_approved(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file)
    assert esc.reason == "approval_required"
    assert esc.detail["tool"] == "append_marker"
    assert esc.detail["arguments"] == {"path": str(marker_file), "marker": "paid"}
    assert esc.detail["why"] == "the run's approvals: append_marker: always"
    (step,) = run_steps(run_id)
    assert (step.status, step.lease_expires_at) == ("waiting_approval", None)
    assert step.attempt - step.deferrals == 0  # the stop is no failed attempt
    with session_scope() as session:
        outcomes = session.exec(
            select(StepAttempt.outcome).where(StepAttempt.step_id == step.id)
        ).all()
    assert outcomes == ["awaiting_approval"]
    assert _lines(marker_file) == []  # stopped before the call
    commands.approve(esc.id or 0, reviewer="ann")
    run = wait_for_run(run_id, ("succeeded", "failed"))
    assert run.status == "succeeded"
    assert _lines(marker_file) == ["paid"]
    (step,) = run_steps(run_id)
    assert step.result == {"lines": 1}
    approval = _approval(step.id or 0)
    assert (approval.status, approval.decided_by) == ("approved", "ann")
    assert approval.arguments_used == approval.arguments
    for _ in range(2):  # the broker delivers the step's message again: nothing runs twice
        queue.send(TASK_EXECUTE_STEP, step.id)
    time.sleep(1.5)
    assert _lines(marker_file) == ["paid"]


def test_calls_waiting_longer_than_any_step_hold_no_worker(
    make_run: MakeRun, marker_file: Path
) -> None:
    """More calls wait than the worker has pool processes, and other work still runs: a wait
    (a day, until its deadline) costs no worker, no lease and no message in flight."""
    waiting = [_gated(make_run, marker_file)[0] for _ in range(SESSION_POOL + 1)]
    noop = [{"name": "a", "kind": "tool", "tool": "noop"}]
    other = make_run(noop, user=f"free-{uuid.uuid4().hex[:8]}")
    assert wait_for_run(other, timeout_s=30).status == "succeeded"
    for run_id in waiting:
        (step,) = run_steps(run_id)
        assert (step.status, step.lease_expires_at) == ("waiting_approval", None)
    assert _lines(marker_file) == []


def test_an_approved_call_that_ran_runs_not_again_on_a_later_attempt(
    make_run: MakeRun, marker_file: Path
) -> None:
    """A worker killed after the tool returned but before the step's end was committed: the
    attempt that runs the step again answers from the journal, and the effect stays one."""
    run_id, esc = _gated(make_run, marker_file)
    commands.approve(esc.id or 0, reviewer="ann")
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    (step,) = run_steps(run_id)
    ctx = ToolContext(run_id, step.id or 0, step.name, step.attempt + 1, 2, {})
    args = {"path": str(marker_file), "marker": "paid"}
    again = approval_gates.tool_step_call(ctx, enabled_tool("append_marker"), args, ALWAYS)
    assert again == {"lines": 1}
    assert _lines(marker_file) == ["paid"]


def test_a_rejected_call_never_runs_and_its_step_fails_with_the_reason(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file, replans=0)
    commands.reject(esc.id or 0, reviewer="bob", comment="not this month")
    again = _next_escalation(run_id)
    assert again.reason == "replan_budget_spent"  # a failure like any other: no replan was left
    (step,) = run_steps(run_id)
    assert (step.status, step.error) == ("failed", "rejected by bob: not this month")
    assert _lines(marker_file) == []
    assert _approval(step.id or 0).status == "rejected"


def _next_escalation(run_id: int, timeout_s: float = 60) -> Escalation:
    """The run's next open escalation, once it escalated again."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with session_scope() as session:
            found = session.exec(
                select(Escalation).where(Escalation.run_id == run_id, Escalation.status == "open")
            ).one_or_none()
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} did not escalate again within {timeout_s} s")


def test_an_edited_call_runs_with_the_edited_arguments_checked_first(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file)
    with pytest.raises(InvalidInput, match=r"^arguments: tool 'append_marker': marker:"):
        commands.edit(esc.id or 0, reviewer="cy", arguments={"path": str(marker_file), "marker": 5})
    with pytest.raises(Conflict, match="waits on a tool call: edit its arguments"):
        commands.edit(esc.id or 0, reviewer="cy", plan={"steps": []})
    assert _open_escalation(run_id).id == esc.id  # nothing was written
    edited = {"path": str(marker_file), "marker": "paid half"}
    commands.edit(esc.id or 0, reviewer="cy", arguments=edited, comment="half now")
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    assert _lines(marker_file) == ["paid half"]
    with session_scope() as session:
        decided = session.get(Escalation, esc.id)
        assert decided is not None and decided.decision == "edit"
        assert decided.answer == {
            "arguments": edited,
            "diff": {"changed": {"marker": ["paid", "paid half"]}},
        }


def test_an_answered_call_is_the_steps_result_and_its_tool_never_runs(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file)
    commands.respond(esc.id or 0, reviewer="dee", answer='{"lines": 7}')
    assert wait_for_run(run_id, ("succeeded", "failed")).status == "succeeded"
    (step,) = run_steps(run_id)
    assert step.result == {"lines": 7}
    assert _lines(marker_file) == []


def test_the_deadline_rejects_a_waiting_call_by_default(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file, replans=0)
    later = utcnow() + timedelta(days=365)
    with session_scope() as session:
        reviews.pass_deadline(session, esc.id or 0, now=later, action="reject")
    queue.send(TASK_COORDINATE, run_id)
    assert _next_escalation(run_id).reason == "replan_budget_spent"
    (step,) = run_steps(run_id)
    assert step.error is not None and step.error.startswith("rejected by deadline: ")
    assert _lines(marker_file) == []


def test_a_run_may_tighten_the_policy_but_never_loosen_it(make_run: MakeRun) -> None:
    noop = [{"name": "a", "kind": "tool", "tool": "noop"}]
    with pytest.raises(InvalidInput, match=r"approvals\.noop: a run may only require approval"):
        make_run(noop, approvals={"noop": "never"})
    with pytest.raises(InvalidInput, match=r"approvals\.pay_out: no such tool"):
        make_run(noop, approvals={"pay_out": "always"})
    with pytest.raises(InvalidInput, match=r"approvals\.noop\.when\.0"):
        make_run(noop, approvals={"noop": {"when": [{"arg": "x"}]}})
    ungated = make_run(noop, approvals={"append_*": "always"})  # a pattern: noop is not gated
    assert wait_for_run(ungated).status == "succeeded"


def test_a_run_cancelled_while_its_call_waits_never_runs_it(
    make_run: MakeRun, marker_file: Path
) -> None:
    run_id, esc = _gated(make_run, marker_file)
    commands.cancel(run_id)
    assert wait_for_run(run_id, ("cancelled",)).status == "cancelled"
    (step,) = run_steps(run_id)
    assert step.status == "cancelled"
    with session_scope() as session:
        withdrawn = session.get(Escalation, esc.id)
        assert withdrawn is not None and withdrawn.status == "decided"
    with pytest.raises(IllegalTransition, match="decided"):
        commands.approve(esc.id or 0, reviewer="late")
    time.sleep(1.0)
    assert _lines(marker_file) == []


def test_a_worker_killed_while_an_approved_call_runs_makes_its_effect_once(
    make_run: MakeRun, marker_file: Path
) -> None:
    """Approved, the call makes its effect and the worker dies before the tool returns (nothing
    journaled): the step's next attempt, once the lease expires, calls the tool again with the
    same idempotency key, and the tool's effect stays one."""
    args = {"path": str(marker_file), "marker": "paid", "seconds": 3}
    step = {"name": "pay", "kind": "tool", "tool": "append_once_then_sleep", "args": args}
    user = f"appr-{uuid.uuid4().hex[:8]}"
    run_id = make_run([step], user=user, approvals={"append_once_then_sleep": "always"})
    assert wait_for_run(run_id).status == "waiting_review"
    commands.approve(_open_escalation(run_id).id or 0, reviewer="ann")
    (paying,) = run_steps(run_id)
    deadline = time.monotonic() + 30
    while not _lines(marker_file):  # the effect is made; the tool sleeps
        assert time.monotonic() < deadline, "the approved call never ran"
        time.sleep(0.05)
    with session_scope() as session:
        running = session.exec(
            select(StepAttempt)
            .where(StepAttempt.step_id == paying.id)
            .order_by(col(StepAttempt.attempt).desc())
        ).first()
    assert running is not None and running.outcome is None
    os.kill(int(running.worker.rsplit(":", 1)[1]), signal.SIGKILL)
    lease_s = get_settings().lease_s
    run = wait_for_run(run_id, ("succeeded", "failed"), timeout_s=lease_s + 45)
    assert run.status == "succeeded"
    (line,) = _lines(marker_file)
    assert line == f"run-{run_id}/step-{paying.id}\tpaid"
    with session_scope() as session:
        outcomes = session.exec(
            select(StepAttempt.outcome)
            .where(StepAttempt.step_id == paying.id)
            .order_by(col(StepAttempt.attempt))
        ).all()
    assert outcomes == ["awaiting_approval", "lease_expired", "succeeded"]
