"""The same request again (`models.engine.repeats`, issue 31): a user who makes a request an
earlier run of theirs met alone starts with that run's final plan, with no plan call; the
failure a replan answered is left out of it, so the second run plans right away what the first
had to find out by failing. Another user, other pinned facts, or runs from before the user was
forgotten, plan as before."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import col, select

from models.db import session_scope
from models.memory import memory_admin
from models.tables import PlanVersion, RunEvent
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
GOAL = "File my Lisbon trip expense report"  # the offline planner's expense playbook
FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}


def _events(run_id: int, kind: str) -> list[dict[str, Any]]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        return [e.detail for e in session.exec(stmt.order_by(col(RunEvent.id)))]


def _plan_calls(run_id: int) -> int:
    return sum(d.get("purpose") == "plan" for d in _events(run_id, "model.call"))


def _version_1(run_id: int) -> PlanVersion:
    with session_scope() as session:
        stmt = select(PlanVersion).where(PlanVersion.run_id == run_id, PlanVersion.version == 1)
        return session.exec(stmt).one()


def test_a_request_met_after_a_replan_starts_with_the_plan_that_met_it(
    make_run: MakeRun,
) -> None:
    user = f"repeat-{uuid.uuid4().hex[:8]}"
    first = wait_for_run(make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1))
    assert (first.status, first.replans_used) == ("succeeded", 1)  # the live rate timed out
    kept = sorted((s.name, s.tool) for s in run_steps(first.id or 0) if s.status == "succeeded")
    failed = [s.tool for s in run_steps(first.id or 0) if s.status == "failed"]
    assert failed and failed[0] not in {tool for _, tool in kept}

    second = wait_for_run(make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1))
    assert (second.status, second.replans_used, second.plan_version) == ("succeeded", 0, 1)
    assert _plan_calls(second.id or 0) == 0 < _plan_calls(first.id or 0)
    assert _events(second.id or 0, "plan.reused") == [{"from_run": first.id}]
    assert sorted((s.name, s.tool) for s in run_steps(second.id or 0)) == kept  # failure left out
    assert _version_1(second.id or 0).created_by == "replanner"  # who found it
    assert second.success_criteria == first.success_criteria  # the planner's, carried
    filed = [(r.final_result or {})["outputs"]["submit"] for r in (first, second)]
    assert [(f["total"], f["currency"]) for f in filed] == [(473.43, "EUR")] * 2

    with session_scope() as session:  # forgotten: the runs stay, what they taught goes
        memory_admin.forget_user(session, user_id=user)
    third = make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1)
    wait_for_run(third)
    assert _plan_calls(third) >= 1 and _events(third, "plan.reused") == []

    other_facts = {**FACTS, "cost_centre": "CC-4411"}
    for run_id in (
        make_run(None, user=user, goal=GOAL, facts=other_facts, replans=1),
        make_run(None, user=f"{user}-b", goal=GOAL, facts=FACTS, replans=1),
    ):
        wait_for_run(run_id)
        assert _plan_calls(run_id) >= 1 and _events(run_id, "plan.reused") == []


def test_a_request_a_person_helped_with_is_planned_again(make_run: MakeRun) -> None:
    """A run that escalated (here: no replan left for the timed-out rate, then a reviewer) is
    not one to copy: the next run of the request asks its planner."""
    user = f"repeat-{uuid.uuid4().hex[:8]}"
    first = wait_for_run(make_run(None, user=user, goal=GOAL, facts=FACTS, replans=0))
    assert first.status == "waiting_review"
    second = make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1)
    assert wait_for_run(second).status == "succeeded"
    assert _plan_calls(second) >= 1 and _events(second, "plan.reused") == []


def test_a_plan_a_should_replan_check_cut_short_is_not_copied(make_run: MakeRun) -> None:
    """A run whose should-replan check answered `replan` ended with a plan cut to what one step
    returned then: the next run of the request asks its planner. (The check's answer is written
    here as the check writes it, for a run the offline rules would not doubt.)"""
    from models.plans.plan_checks import PlanCheck

    user = f"repeat-{uuid.uuid4().hex[:8]}"
    first = wait_for_run(make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1))
    assert first.status == "succeeded"
    receipts = next(s for s in run_steps(first.id or 0) if s.name == "receipts")
    with session_scope() as session:
        session.add(
            PlanCheck(
                run_id=first.id or 0,
                plan_version=1,
                step_id=receipts.id or 0,
                verdict="replan",
                reason="no receipts",
            )
        )
    second = make_run(None, user=user, goal=GOAL, facts=FACTS, replans=1)
    wait_for_run(second)
    assert _plan_calls(second) >= 1 and _events(second, "plan.reused") == []
