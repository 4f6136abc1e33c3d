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


def _echo(name: str, value: Any, after: list[str] | None = None) -> dict[str, Any]:
    step = {"name": name, "kind": "tool", "tool": "echo", "args": {"value": value}}
    return step if after is None else {**step, "after": after}


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


def test_what_the_run_delivers_is_checked_not_what_fed_it(make_run: MakeRun) -> None:
    run_id = make_run(
        [
            _echo("receipts", {"currency": "USD", "total": 510.0}, after=[]),
            _echo("report", {"currency": "eur", "total": "473.430"}, after=["receipts"]),
        ],
        facts={"currency": "EUR", "total": "473.43"},
    )
    run = wait_for_run(run_id)
    assert run.status == "succeeded", run.error
