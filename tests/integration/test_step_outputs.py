"""Exact values on the real engine (issue 12, item 4), with the offline provider: a model step's
declared output becomes its result and feeds `${steps.NAME.FIELD}` to a later step; a value the
goal states is pinned at submission when asked, and reaches a step as `${facts.KEY}`; one submit
check caps a pinned fact's value for every submit path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlmodel import col, func, select

from models.db import session_scope
from models.engine import submissions
from models.engine.runs import FACT_VALUE_MAX_CHARS, pinned_facts
from models.engine.submissions import RunRequest
from models.errors import InvalidInput
from models.plans.plans import parse_plan
from models.plans.tools import configured_tool_names
from models.settings import get_settings
from models.tables import Escalation, Run, RunEvent
from ops.stack import LocalStack
from tests.integration.conftest import run_steps, wait_for_run

pytestmark = pytest.mark.integration
MakeRun = Callable[..., int]
OUTPUT = {"total": "number", "currency": "string"}


def echo(name: str, value: Any, after: list[str]) -> dict[str, Any]:
    return {"name": name, "kind": "tool", "tool": "echo", "args": {"value": value}, "after": after}


def read(output: dict[str, str]) -> dict[str, Any]:
    instruction = "Read the converted total and its currency."
    return {"name": "read", "kind": "model", "instruction": instruction, "output": output}


def events(run_id: int, kind: str) -> list[RunEvent]:
    with session_scope() as session:
        stmt = select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.kind == kind)
        return list(session.exec(stmt.order_by(col(RunEvent.id))))


def test_a_model_steps_output_fields_feed_a_later_step(make_run: MakeRun) -> None:
    """The offline model step answers JSON of its fields, found in the result of the step it
    waits for; the result is those fields, and the later step gets the number as a number."""
    converted = echo("convert", {"total": 473.43, "currency": "EUR", "lines": 4}, [])
    use = echo("file", {"total": "${steps.read.total}", "note": "in ${steps.read.currency}"}, [])
    run_id = make_run(
        [converted, {**read(OUTPUT), "after": ["convert"]}, {**use, "after": ["read"]}]
    )
    run = wait_for_run(run_id)
    assert run.status == "succeeded", run.error
    _, model, last = run_steps(run_id)
    assert (model.name, model.status, model.output) == ("read", "succeeded", OUTPUT)
    assert model.result == {"total": 473.43, "currency": "EUR"}  # the fields, nothing else
    assert last.result == {"value": {"total": 473.43, "note": "in EUR"}}
    assert events(run_id, "step.output.invalid") == []


def test_an_output_the_answer_cannot_fill_fails_the_step_and_nothing_of_it_is_stored(
    make_run: MakeRun,
) -> None:
    """The offline provider never makes a value up: a field found nowhere is left out, the
    answer is refused naming it, re-asked up to AGENTQ_PLAN_MAX_ATTEMPTS answers, and the step
    fails; with no replan budget the run escalates."""
    source = echo("convert", {"total": 473.43}, [])
    output = {"total": "number", "receipt_count": "integer"}
    run_id = make_run([source, {**read(output), "after": ["convert"]}], replans=0)
    run = wait_for_run(run_id)
    assert run.status == "waiting_review"
    _, model = run_steps(run_id)
    limit = get_settings().plan_max_attempts
    assert (model.status, model.result, model.attempt) == ("failed", None, 1)
    assert model.error == (
        f"step 'read': the model's answer did not fit the step's output after {limit} answers "
        f"(AGENTQ_PLAN_MAX_ATTEMPTS={limit}): output: missing 'receipt_count'; declared: total, "
        "receipt_count"
    )
    refused = events(run_id, "step.output.invalid")
    assert [e.detail["answer"] for e in refused] == list(range(1, limit + 1))
    assert refused[0].detail["raw_output"] == '{"total": 473.43}'
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run_id))
    assert (esc.reason, esc.step_id) == ("replan_budget_spent", model.id)


def test_values_the_goal_states_are_pinned_when_asked_and_explicit_facts_win(
    engine: LocalStack,
) -> None:
    plan = parse_plan(
        {"steps": [echo("use", "${facts.amount} ${facts.currency} to ${facts.cost_centre}", [])]},
        tools=configured_tool_names(),
    )
    request = RunRequest(
        user_id="pins",
        goal="Submit 473.43 EUR to CC-4410",
        facts={"currency": "EUR", "cost_centre": "CC-9999"},
        plan=plan,
        pin_from_goal=True,
    )
    submitted = submissions.submit(request, settings=get_settings())
    assert submitted.from_goal.pinned == {"amount": "473.43"}
    assert submitted.from_goal.overridden == {"cost_centre": "CC-4410"}
    run = wait_for_run(submitted.run_id)
    assert run.status == "succeeded", run.error
    with session_scope() as session:
        pinned = pinned_facts(session, submitted.run_id, by_user=True)
    assert pinned == {"currency": "EUR", "cost_centre": "CC-9999", "amount": "473.43"}
    (step,) = run_steps(submitted.run_id)
    assert step.result == {"value": "473.43 EUR to CC-9999"}
    (event,) = events(submitted.run_id, "run.submitted")
    assert event.detail["pinned_from_goal"] == {"amount": "473.43"}
    unasked = submissions.submit(
        RunRequest(user_id="pins", goal="Submit 473.43 EUR to CC-4410", plan=plan),
        settings=get_settings(),
    )
    assert unasked.from_goal.found == {
        "amount": "473.43",
        "currency": "EUR",
        "cost_centre": "CC-4410",
    }
    with session_scope() as session:
        assert pinned_facts(session, unasked.run_id) == {}  # shown, not pinned


def test_the_demos_goal_stating_its_values_pins_what_its_report_needs(engine: LocalStack) -> None:
    """The demo's first scenario with the currency and cost centre said in the goal instead of
    as --fact: the expense playbook's `${facts.currency}` and `${facts.cost_centre}` get them,
    and the report is filed as the demo's is (one replan onto the cached rate)."""
    goal = "File my Lisbon trip expense report in EUR to CC-4410"
    request = RunRequest(
        user_id="pins-demo",
        goal=goal,
        facts={"trip": "lisbon-2026-10"},
        replans=1,
        pin_from_goal=True,
    )
    submitted = submissions.submit(request, settings=get_settings())
    assert submitted.from_goal.pinned == {"currency": "EUR", "cost_centre": "CC-4410"}
    run = wait_for_run(submitted.run_id)
    assert run.status == "succeeded", run.error
    (filed,) = [s for s in run_steps(submitted.run_id) if s.name == "submit"]
    assert filed.result is not None
    assert (filed.result["total"], filed.result["currency"], filed.result["cost_centre"]) == (
        473.43,
        "EUR",
        "CC-4410",
    )


def test_a_fact_value_over_the_cap_is_refused_naming_the_fact_and_nothing_is_written(
    engine: LocalStack,
) -> None:
    def runs() -> int:
        with session_scope() as session:
            return session.exec(select(func.count()).where(Run.user_id == "capped")).one()

    big = "x" * (FACT_VALUE_MAX_CHARS + 1)
    request = RunRequest(user_id="capped", goal="note it", facts={"note": big})
    with pytest.raises(InvalidInput) as refused:
        submissions.submit(request, settings=get_settings())
    assert str(refused.value).startswith(
        f"fact 'note': the value is at most {FACT_VALUE_MAX_CHARS} characters "
        f"(got {FACT_VALUE_MAX_CHARS + 1})"
    )
    assert runs() == 0
    noop = parse_plan({"steps": [{"name": "n", "kind": "tool", "tool": "noop"}]}, tools=["noop"])
    fits = RunRequest(user_id="capped", goal="note it", facts={"note": big[:-1]}, plan=noop)
    assert submissions.submit(fits, settings=get_settings()).run_id
    assert runs() == 1


def test_a_reviewers_answer_for_an_output_step_has_its_fields(make_run: MakeRun) -> None:
    """Nothing holds the total, so the offline model step fails (it never invents a value); a
    reviewer's answer in its place is refused unless it has the declared fields, typed."""
    from models.review import reviews

    run_id = make_run([read({"total": "number"})], replans=0)
    assert wait_for_run(run_id).status == "waiting_review"
    with session_scope() as session:
        (esc,) = session.exec(select(Escalation).where(Escalation.run_id == run_id)).all()
    for bad in ({"total": "abc"}, {"total": 1, "extra": [1]}, {"answer": 473.43}):
        with session_scope() as session, pytest.raises(InvalidInput, match="answer: output"):
            reviews.respond(session, esc.id or 0, reviewer="rita", answer=bad)
    with session_scope() as session:
        reviews.respond(session, esc.id or 0, reviewer="rita", answer={"total": 473.43})
    with session_scope() as session:
        assert session.get(Escalation, esc.id).decision == "respond"
