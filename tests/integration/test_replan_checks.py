"""The should-replan check on the real stack (issue 12, item 2): after a step succeeds, a run that
checks asks whether the rest of its plan still makes sense (the offline provider: not when a value
a later step uses came back empty); a "no" is a replan charged to the replan budget, in a new plan
version without the steps that had not started, and an escalation once the budget is spent."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlmodel import col, select

from models.db import session_scope
from models.engine import queue
from models.engine.queue import TASK_COORDINATE
from models.plans.plan_checks import PlanCheck
from models.review import reviews
from models.tables import Escalation, RunEvent, Step
from tests.integration.conftest import wait_for_run

MakeRun = Callable[..., int]


def _plan(receipts: list[str]) -> list[dict[str, Any]]:
    return [
        {"name": "receipts", "kind": "tool", "tool": "echo", "args": {"value": receipts}},
        {
            "name": "report",
            "kind": "tool",
            "tool": "echo",
            "args": {"value": "${steps.receipts.value}"},
        },
    ]


def _checks(run_id: int) -> list[PlanCheck]:
    with session_scope() as session:
        stmt = select(PlanCheck).where(PlanCheck.run_id == run_id).order_by(col(PlanCheck.id))
        return list(session.exec(stmt))


def _steps(run_id: int) -> dict[str, str]:
    with session_scope() as session:
        return {s.name: s.status for s in session.exec(select(Step).where(Step.run_id == run_id))}


def _purposes(run_id: int) -> list[str]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == "model.call")
        return [e.detail.get("purpose", "") for e in session.exec(stmt)]


def test_a_result_that_makes_the_rest_pointless_is_replanned(make_run: MakeRun) -> None:
    run = wait_for_run(make_run(_plan([]), replan_check="model", replans=1))
    assert run.status == "succeeded", run.error
    assert (run.plan_version, run.replans_used) == (2, 1)
    (check,) = _checks(run.id or 0)
    assert (check.verdict, check.plan_version, check.source) == ("replan", 1, "offline")
    assert "receipts.value is empty" in check.reason and "'report'" in check.reason
    steps = _steps(run.id or 0)
    assert steps["report"] == "cancelled"  # dropped before it started
    assert steps["after_receipts"] == "succeeded"
    assert "after_receipts" in (run.final_result or {})["outputs"]
    assert _purposes(run.id or 0).count("check_plan") == 1  # none after the last step


def test_a_result_the_rest_can_use_goes_on(make_run: MakeRun) -> None:
    run = wait_for_run(make_run(_plan(["taxi.pdf"]), replan_check="model"))
    assert run.status == "succeeded", run.error
    assert run.plan_version == 1 and run.replans_used == 0
    assert [c.verdict for c in _checks(run.id or 0)] == ["continue"]
    assert _steps(run.id or 0) == {"receipts": "succeeded", "report": "succeeded"}


def test_a_no_with_the_replan_budget_spent_escalates(make_run: MakeRun) -> None:
    run = wait_for_run(make_run(_plan([]), replan_check="model", replans=0))
    assert run.status == "waiting_review"
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run.id)).all()
    assert esc.reason == "replan_budget_spent" and esc.detail["replan_check"] == "replan"
    assert esc.detail["step"] == "receipts" and _steps(run.id or 0)["report"] == "pending"


def test_runs_that_do_not_check_never_ask(make_run: MakeRun) -> None:
    run = wait_for_run(make_run(_plan([])))
    assert run.status == "succeeded" and _checks(run.id or 0) == []
    assert "check_plan" not in _purposes(run.id or 0)


def test_a_reviewer_who_approves_the_plan_as_it_is_overrules_the_check(make_run: MakeRun) -> None:
    run = wait_for_run(make_run(_plan([]), replan_check="model", replans=0))
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run.id)).all()
        reviews.approve(session, esc.id or 0, reviewer="rita", max_attempts=3)
    assert "should-replan check after it said" in esc.detail["error"]
    queue.send(TASK_COORDINATE, run.id)
    run = wait_for_run(run.id or 0, ("succeeded", "failed"))
    assert run.status == "succeeded", run.error
    assert [c.verdict for c in _checks(run.id or 0)] == ["overruled"]
    assert _steps(run.id or 0)["report"] == "succeeded"  # the plan went on as it was
