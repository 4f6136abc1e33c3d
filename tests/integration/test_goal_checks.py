"""A run is checked against the facts its user pinned before it succeeds (issue 12, item 1), on
the real stack: a report delivered in USD when `currency = EUR` is pinned escalates
`goal_not_met` without asking for an answer, a reviewer's approval accepts it as it is, and an
intermediate value that differs (the receipts' own currency) is not held against the run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlmodel import col, select

from models import queue, reviews
from models.db import session_scope
from models.queue import TASK_COORDINATE
from models.tables import Escalation, RunEvent
from tests.integration.conftest import wait_for_run

MakeRun = Callable[..., int]


def _echo(name: str, value: Any) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": "echo", "args": {"value": value}}


def _calls(run_id: int) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == "model.call")
        return list(session.exec(stmt))


def test_a_deliverable_that_contradicts_a_pinned_fact_escalates(make_run: MakeRun) -> None:
    run_id = make_run(
        [_echo("report", {"total": 473.43, "currency": "USD"})],
        facts={"currency": "EUR"},
    )
    run = wait_for_run(run_id)
    assert run.status == "waiting_review" and run.final_result is None
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
    assert esc.reason == "goal_not_met"
    (missing,) = esc.detail["missing"]
    assert "'report' delivered value.currency = 'USD'" in missing and "'EUR'" in missing
    assert _calls(run_id) == []  # no answer was paid for

    with session_scope() as session:  # the reviewer accepts the outcome as it is
        reviews.approve(session, esc.id or 0, reviewer="rita", max_attempts=3)
    queue.send(TASK_COORDINATE, run_id)
    run = wait_for_run(run_id, ("succeeded", "failed"))
    assert run.status == "succeeded"
    assert run.final_result is not None and run.final_result["outputs"]["report"]["value"] == {
        "total": 473.43,
        "currency": "USD",
    }
    with session_scope() as session:
        escalations = session.exec(
            select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
        ).all()
    assert len(escalations) == 1  # approved once, not checked again for the same plan


def test_a_step_after_the_deliverable_does_not_hide_it(make_run: MakeRun) -> None:
    """Waiting for the report is not using it: the USD report is still what the run delivered
    (a new user's first try: a trailing `noop` made such a run succeed)."""
    run_id = make_run(
        [_echo("report", {"currency": "USD"}), {"name": "after", "kind": "tool", "tool": "noop"}],
        facts={"currency": "EUR"},
    )
    assert wait_for_run(run_id).status == "waiting_review"


def test_what_the_run_delivers_is_checked_not_what_fed_it(make_run: MakeRun) -> None:
    """The demo's expense playbook: the receipts come in USD and the rate's base is USD, both
    used by later steps; the report they feed is filed in the pinned EUR."""
    from worker.tools.expenses import EXPENSE_PLAYBOOK

    facts = {"trip": "lisbon-2026-10", "currency": "EUR", "cost_centre": "CC-4410"}
    run = wait_for_run(make_run(EXPENSE_PLAYBOOK, facts=facts))
    assert run.status == "succeeded", run.error
    outputs = (run.final_result or {})["outputs"]
    assert outputs["receipts"]["currency"] != "EUR"  # an intermediate value that differs
    assert outputs["submit"]["currency"] == "EUR"
