"""`agentq demo`: the expense-report story, end to end, on real processes.

The demo user's memory is forgotten first. Scenario 1: the live rate service times out; with a
replan budget of 1 the run is replanned onto the cached monthly rate table and completes, and its
episode and facts are remembered (by the memory task that follows the run's end: the demo waits
for it before scenario 2). Scenario 2: the planner recalls that episode and plans the
cached rate from the start, but November's cached table is missing, so the budget is spent, the
run escalates, a reviewer answers with a rate (`agentq review respond ID --answer 0.95`, done here
by the demo itself) and the run completes.
Both print the submitted total and cost centre, read from the submit step's row.

`--model NAME` runs it on a small local model served here (`ops.demo_local`), with the demo
user's procedures for expense reports seeded first; `--scenarios 1` stops after the first.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.rule import Rule
from rich.text import Text

from models.db import session_scope
from models.engine.runs import get_run
from models.engine.submissions import RunRequest
from models.errors import InvalidInput
from models.formats import provider_label
from models.front import commands, queries
from models.memory import memory_admin
from models.settings import get_settings
from ops import escalation_views, preflight
from ops.demo_local import (
    DEMO_USER,
    engine_configured,
    local_model,
    model_names,
    offline_model,
    seed_procedures,
)
from ops.processes import exit_on_sigterm
from ops.watch import watch_until_settled

DEMO_GOAL = "File my Lisbon trip expense report"
DEMO_FACTS = {"currency": "EUR", "cost_centre": "CC-4410"}
REVIEWER_RATE = "0.95"  # what the demo's reviewer answers in scenario 2
MEMORY_TIMEOUT_S = 120.0  # how long a run's memory task may take before the demo gives up
POLL_S = 0.2


@dataclass(frozen=True)
class Scenario:
    """One demo run: its trip (which month's receipts) and what it shows."""

    title: str
    trip: str


SCENARIOS = (
    Scenario("1. The rate service times out; one replan uses the cached rate", "lisbon-2026-10"),
    Scenario(
        "2. November: memory skips the rate service; no table either, a reviewer answers",
        "lisbon-2026-11",
    ),
)


def run_demo(console: Console, *, model: str | None = None, scenarios: int = len(SCENARIOS)) -> int:
    """Run the first `scenarios` scenarios on `model` (`ops.demo_local.model_names`: `offline`,
    or a local model served here; None: the configured provider); exit code 0 when each
    submitted a report, else 1. Raises `InvalidInput` for a model it cannot use here."""
    if model is not None and model not in model_names():
        raise InvalidInput(f"--model: {model!r} is not one of {', '.join(model_names())}")
    exit_on_sigterm()  # a TERM (a time box, a supervisor) unwinds: the stack and server stop
    served = (
        nullcontext()
        if model is None
        else offline_model()
        if model == "offline"
        else local_model(console, model)
    )
    with served:
        settings = get_settings()
        configured = engine_configured()
        label = provider_label(settings.provider)
        named = "" if settings.provider == "offline" else f", model {settings.model}"
        console.print(Text(f"provider: {label}{named}"))
        if not configured:
            preflight.check_data_dir(settings.home / "demo")
            console.print(Text(f"starting the embedded stack in {settings.home / 'demo'} …"))
        if notice := preflight.check_embedder(settings):
            console.print(Text(notice, style="yellow"), soft_wrap=True)
        from ops.local import start_engine

        # Its user's memory is forgotten first (its procedures too: a local demo's are seeded
        # again), before the workers check the memory's embedding model: a demo run before the
        # `local` extra was installed left hash vectors.
        stack = (
            nullcontext()
            if configured
            else start_engine(
                settings.home / "demo",
                say=lambda line: console.print(Text(line)),
                prepare=lambda: _prepare(console),
                owner="agentq demo",
            )
        )
        with stack:
            if configured:
                _forget_demo_user(console)
            if model not in (None, "offline"):
                seed_procedures(console)
            results = [_scenario(console, s) for s in SCENARIOS[:scenarios]]
    return 0 if all(results) else 1


def _scenario(console: Console, scenario: Scenario) -> bool:
    console.print(Rule(scenario.title))
    run_id = _submit(console, scenario.trip)
    console.print(
        Text(
            f"$ agentq run submit {DEMO_GOAL!r} --fact currency=EUR --fact cost_centre=CC-4410 "
            f"--fact trip={scenario.trip} --replans 1   # run {run_id}"
        )
    )
    watch_until_settled(console, run_id)
    with session_scope() as session:
        waiting = get_run(session, run_id).status == "waiting_review"
        esc = queries.open_escalation(session, run_id) if waiting else None
        if esc is not None:
            console.print(escalation_views.escalation_panel(session, esc))
            escalation_id = esc.id or 0
    if waiting:
        _respond(console, escalation_id)
        watch_until_settled(console, run_id)
    _show_recalled(console, run_id)
    reported = _report(console, run_id)
    _wait_for_memory(console, run_id)  # the next scenario recalls what this run wrote
    return reported


def _prepare(console: Console) -> None:
    """Before the embedded stack's workers start: forget the demo user, then check the memory's
    embedding model (`ops.local.check_memory_model`)."""
    from ops.local import check_memory_model

    _forget_demo_user(console)
    check_memory_model()


def _forget_demo_user(console: Console) -> None:
    """Start from no memory, so scenario 1 meets the rate-service failure for the first time."""
    with session_scope() as session:
        counts = memory_admin.forget_user(session, user_id=DEMO_USER)
    forgot = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    console.print(Text(f"$ agentq memory forget --user {DEMO_USER} --yes   # forgot {forgot}"))


def _wait_for_memory(console: Console, run_id: int) -> None:
    """Wait until the run's memory task has ended (`models.memory.memory_admin.memory_ended`: it
    runs after the run ends, on the `memory` queue), and say what it wrote; gives up after
    `MEMORY_TIMEOUT_S` seconds, saying so."""
    deadline = time.monotonic() + MEMORY_TIMEOUT_S
    while True:
        with session_scope() as session:
            event = memory_admin.memory_ended(session, run_id)
        if event is not None or time.monotonic() > deadline:
            break
        time.sleep(POLL_S)
    if event is None:
        line = f"run {run_id}'s memory: not written within {MEMORY_TIMEOUT_S:g} s"
        console.print(Text(line, style="yellow"))
    elif event.kind == "memory.remembered":
        added = sum(int(event.detail.get(k, 0)) for k in ("added", "superseded"))
        console.print(Text(f"run {run_id}'s memory: its episode and {added} new facts"))
    else:
        console.print(Text(f"run {run_id}'s memory: {event.kind}", style="yellow"))


def _show_recalled(console: Console, run_id: int) -> None:
    """What memory gave the planner of this run (the `memory.recalled` event of its plan call)."""
    with session_scope() as session:
        event = queries.first_event(session, run_id, "memory.recalled")
    if event is None:
        console.print(Text("memory recalled for planning: nothing yet", style="dim"))
        return
    lines = [f"  past run {r}" for r in event.detail.get("episodes", [])]
    lines += [f"  fact: {text}" for text in event.detail.get("facts", [])]
    console.print(Text("memory recalled for planning:\n" + "\n".join(lines), style="cyan"))


def _submit(console: Console, trip: str) -> int:
    request = RunRequest(
        user_id=DEMO_USER, goal=DEMO_GOAL, facts={**DEMO_FACTS, "trip": trip}, replans=1
    )
    submitted = commands.submit(request)
    if not submitted.notified:
        line = "the broker could not be reached; the reconciler sends the run's first task later"
        console.print(Text(line, style="yellow"))
    return submitted.run_id


def _respond(console: Console, escalation_id: int) -> None:
    """Answer as `agentq review respond` does (`models.front.commands.respond`: the answer is read
    against the failed tool's declared result, `{"rate": 0.95}` for the rate tools)."""
    console.print(Text(f"$ agentq review respond {escalation_id} --answer {REVIEWER_RATE}"))
    done = commands.respond(escalation_id, reviewer="demo-reviewer", answer=REVIEWER_RATE)
    if not done.notified:
        line = "the broker could not be reached; the reconciler takes the run on later"
        console.print(Text(line, style="yellow"))


def _report(console: Console, run_id: int) -> bool:
    with session_scope() as session:
        run = get_run(session, run_id)
        outputs: dict[str, Any] = (run.final_result or {}).get("outputs", {})
        status = run.status
    submitted = outputs.get("submit")
    if status != "succeeded" or not submitted:
        console.print(Text(f"run {run_id} ended {status} without a submitted report", "red"))
        return False
    console.print(
        Text(
            f"run {run_id} submitted report {submitted['report_id']}: total "
            f"{submitted['total']:.2f} {submitted['currency']}, "
            f"cost centre {submitted['cost_centre']}",
            style="green",
        )
    )
    return True
