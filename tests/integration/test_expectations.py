"""Steps' expectations on the real engine: a tool step whose result misses one fails with the
reason, once (no retry), and the coordinator's usual failure handling follows; a step whose
result meets its expectations succeeds (issue 12, item 2)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import col, select

from api.run_views import step_out
from models.db import session_scope
from models.engine import previews
from models.tables import Escalation, PlanVersion, StepAttempt
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
MET = [{"key": "value.total", "min": 0, "max": 500}, {"key": "value.currency", "in": ["EUR"]}]
TOO_MUCH = [{"key": "value.total", "max": 500}]
REASON = "step 'bad': unmet expectation: value.total: expected a number <= 500, got 612.5"


def echo(name: str, value: Any, expect: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "name": name,
        "kind": "tool",
        "tool": "echo",
        "args": {"value": value},
        "expect": expect,
    }


def escalations(run_id: int) -> list[Escalation]:
    with session_scope() as session:
        return list(session.exec(select(Escalation).where(Escalation.run_id == run_id)))


def attempts(step_id: int) -> int:
    with session_scope() as session:
        return len(session.exec(select(StepAttempt).where(StepAttempt.step_id == step_id)).all())


def test_a_missed_expectation_fails_its_step_once_and_a_met_one_succeeds(
    make_run: MakeRun,
) -> None:
    good = echo("good", {"total": 473.43, "currency": "EUR"}, MET)
    bad = echo("bad", {"total": 612.5, "currency": "EUR"}, TOO_MUCH)
    run_id = make_run([good, bad], replans=0)
    run = wait_for_run(run_id)
    assert run.status == "waiting_review"
    first, second = run_steps(run_id)
    assert (first.name, first.status, first.error) == ("good", "succeeded", None)
    assert first.result == {"value": {"total": 473.43, "currency": "EUR"}}
    assert (second.name, second.status, second.error) == ("bad", "failed", REASON)
    assert second.result is None and second.attempt == 1
    assert attempts(second.id or 0) == 1  # failed for good: the same call gives the same result
    (esc,) = escalations(run_id)
    assert (esc.reason, esc.step_id) == ("replan_budget_spent", second.id)
    assert esc.detail["error"] == REASON
    with session_scope() as session:  # as the run's page and the API show the steps
        shown = [step_out(s) for s in previews.steps_shown(session, run_id)]
    assert [s.expect for s in shown] == [MET, TOO_MUCH]


def test_a_replan_keeps_the_expectation_so_the_run_escalates_when_the_budget_is_spent(
    make_run: MakeRun,
) -> None:
    """The offline replanner puts the failed step in its own place once more, with its
    expectation: it fails again, and the spent replan budget escalates the run."""
    run_id = make_run([echo("bad", {"total": 612.5}, TOO_MUCH)], replans=1)
    run = wait_for_run(run_id)
    assert (run.status, run.replans_used, run.plan_version) == ("waiting_review", 1, 2)
    steps = run_steps(run_id)
    assert [(s.name, s.status, s.plan_version, s.expect) for s in steps] == [
        ("bad", "failed", 1, TOO_MUCH),
        ("bad", "failed", 2, TOO_MUCH),
    ]
    assert all(s.error == REASON for s in steps)
    with session_scope() as session:
        versions = session.exec(
            select(PlanVersion).where(PlanVersion.run_id == run_id).order_by(col(PlanVersion.id))
        ).all()
    assert [(v.created_by, v.replaces_step_id) for v in versions] == [
        ("submitter", None),
        ("replanner", steps[0].id),
    ]
    (esc,) = escalations(run_id)
    assert (esc.reason, esc.step_id) == ("replan_budget_spent", steps[1].id)


def test_a_reviewers_answer_must_meet_the_steps_expectations(make_run: MakeRun) -> None:
    """An answer in the failed step's place stands as its result: one its expectations refuse
    is refused, naming them, and the escalation stays open (a new user's try: GBP went in)."""
    from models.errors import InvalidInput
    from models.review import reviews

    run_id = make_run([echo("bad", {"total": 612.5, "currency": "EUR"}, TOO_MUCH)], replans=0)
    assert wait_for_run(run_id).status == "waiting_review"
    (esc,) = escalations(run_id)
    with session_scope() as session, pytest.raises(InvalidInput, match="answer: step 'bad'"):
        reviews.respond(session, esc.id or 0, reviewer="rita", answer={"value": {"total": 900}})
    (still,) = escalations(run_id)
    assert still.decision is None
    with session_scope() as session:
        reviews.respond(session, esc.id or 0, reviewer="rita", answer={"value": {"total": 400}})
    (done,) = escalations(run_id)
    assert done.decision == "respond"
