"""`agentq demo`: the expense-report story, end to end, on real processes.

Scenario 1: the live rate service times out; with a replan budget of 1 the run is replanned onto
the cached monthly rate table and completes. Scenario 2: November's cached table is missing too, so
the budget is spent, the run escalates, a reviewer answers with a rate
(`agentq review respond ID --answer 0.95`, done here by the demo itself) and the run completes.
Both print the submitted total and cost centre, read from the submit step's row.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.rule import Rule

from models import queue, reviews
from models.db import session_scope
from models.queue import TASK_COORDINATE
from models.runs import get_run, submit_run
from models.settings import get_settings
from ops import views

DEMO_GOAL = "File my Lisbon trip expense report"
DEMO_FACTS = {"currency": "EUR", "cost_centre": "CC-4410"}
REVIEWER_RATE = "0.95"  # what the demo's reviewer answers in scenario 2


@dataclass(frozen=True)
class Scenario:
    """One demo run: its trip (which month's receipts) and what it shows."""

    title: str
    trip: str


SCENARIOS = (
    Scenario("1. The rate service times out; one replan uses the cached rate", "lisbon-2026-10"),
    Scenario("2. The cached table is missing too; a reviewer supplies the rate", "lisbon-2026-11"),
)


def run_demo(console: Console) -> int:
    """Run both scenarios; exit code 0 when both submitted a report, else 1."""
    settings = get_settings()
    configured = bool(os.environ.get("AGENTQ_DATABASE_URL") or settings.database_url)
    console.print(f"provider: {views.provider_label(settings.provider)}")
    if not configured:
        console.print(f"starting the embedded stack in {settings.home / 'demo'} …")
    from ops.local import start_engine

    stack = nullcontext() if configured else start_engine(settings.home / "demo")
    with stack:
        results = [_scenario(console, s) for s in SCENARIOS]
    return 0 if all(results) else 1


def _scenario(console: Console, scenario: Scenario) -> bool:
    from ops.cli import watch_until_settled

    console.print(Rule(scenario.title))
    run_id = _submit(scenario.trip)
    console.print(
        f"$ agentq submit {DEMO_GOAL!r} --fact currency=EUR --fact cost_centre=CC-4410 "
        f"--fact trip={scenario.trip} --replans 1   # run {run_id}"
    )
    watch_until_settled(run_id)
    with session_scope() as session:
        waiting = get_run(session, run_id).status == "waiting_review"
        esc = views.open_escalation(session, run_id) if waiting else None
        if esc is not None:
            console.print(views.escalation_panel(session, esc))
            escalation_id = esc.id or 0
    if waiting:
        _respond(console, escalation_id)
        watch_until_settled(run_id)
    return _report(console, run_id)


def _submit(trip: str) -> int:
    with session_scope() as session:
        run = submit_run(
            session,
            settings=get_settings(),
            user_id="demo",
            goal=DEMO_GOAL,
            facts={**DEMO_FACTS, "trip": trip},
            replans=1,
        )
        run_id = run.id or 0
    queue.send(TASK_COORDINATE, run_id)
    return run_id


def _respond(console: Console, escalation_id: int) -> None:
    console.print(f"$ agentq review respond {escalation_id} --answer {REVIEWER_RATE}")
    with session_scope() as session:
        run = reviews.respond(
            session,
            escalation_id,
            reviewer="demo-reviewer",
            answer=reviews.answer_from_text(REVIEWER_RATE, returns=("rate",)),
        )
        run_id = run.id or 0
    queue.send(TASK_COORDINATE, run_id)


def _report(console: Console, run_id: int) -> bool:
    with session_scope() as session:
        run = get_run(session, run_id)
        outputs: dict[str, Any] = (run.final_result or {}).get("outputs", {})
        status = run.status
    submitted = outputs.get("submit")
    if status != "succeeded" or not submitted:
        console.print(f"[red]run {run_id} ended {status} without a submitted report[/]")
        return False
    console.print(
        f"[green]run {run_id} submitted report {submitted['report_id']}: total "
        f"{submitted['total']:.2f} {submitted['currency']}, "
        f"cost centre {submitted['cost_centre']}[/]"
    )
    return True
