"""The goal checks that need no model (issue 12, item 1): a run's deliverables against the facts
its user pinned, and success criteria judged by the values they name (the offline provider's
check) (`models.engine.goal_checks`)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from models.engine.goal_checks import (
    agrees,
    conflicts,
    criteria_texts,
    deliverables,
    rule_verdict,
    terms,
)
from models.engine.goal_evidence import given_values, restating
from models.engine.runs import add_criteria
from models.plans.plans import MAX_CRITERIA, PlanSpec
from models.tables import Run, Step


@pytest.mark.parametrize(
    ("pinned", "value", "expected"),
    [
        ("EUR", "EUR", True),
        ("EUR", " eur ", True),
        ("EUR", "USD", False),
        ("473.43", 473.43, True),
        ("473.43", "473.430", True),
        ("473.43", 473.42, False),
        ("10", 10, True),
        ("true", True, True),
        ("1", True, False),  # a bool is no number
        ("nan", float("nan"), True),  # not numbers: compared as text
        ("CC-4410", "CC-4411", False),
    ],
)
def test_a_field_agrees_with_a_pinned_value(pinned: str, value: Any, expected: bool) -> None:
    assert agrees(pinned, value) is expected


def test_a_report_in_usd_conflicts_with_a_pinned_eur() -> None:
    report = {"report_id": "EXP-1", "total": 473.43, "currency": "USD", "cost_centre": "CC-4410"}
    (conflict,) = conflicts({"currency": "EUR", "Cost_Centre": "CC-4410"}, {"submit": report})
    assert (conflict.step, conflict.path, conflict.found, conflict.fact) == (
        "submit",
        "currency",
        "USD",
        "currency",
    )
    assert "'submit' delivered currency = 'USD'" in conflict.describe()
    assert "EUR" in conflict.describe()


def test_nested_fields_are_found_and_objects_never_compared() -> None:
    result = {"value": {"lines": [{"currency": "EUR"}, {"currency": "GBP"}], "currency": None}}
    found = conflicts({"currency": "EUR"}, {"report": result})
    assert [c.path for c in found] == ["value.lines[1].currency"]
    assert conflicts({"value": "x"}, {"report": result}) == []  # `value` is an object here


def test_nothing_pinned_or_nothing_named_so_is_no_conflict() -> None:
    assert conflicts({}, {"a": {"currency": "USD"}}) == []
    assert conflicts({"trip": "paris"}, {"a": {"currency": "USD"}}) == []


def _step(name: str, status: str = "succeeded", **args: Any) -> Step:
    return Step(run_id=1, plan_version=1, position=0, name=name, status=status, args=args)


def test_the_deliverables_are_the_succeeded_steps_no_step_refers_to() -> None:
    steps = [
        _step("receipts"),
        _step("convert", receipts="${steps.receipts.receipts}"),
        _step("submit", total="${steps.convert.total}"),
        _step("after_it"),  # waits for `submit` (the step before it) but uses nothing of it
        _step("broken", "failed"),
    ]
    assert [s.name for s in deliverables(steps)] == ["submit", "after_it"]


@pytest.mark.parametrize(
    ("criterion", "expected"),
    [
        ("Filed in EUR against CC-4410, total 1,200.50", ["EUR", "CC-4410", "1200.50"]),
        ("The report id starts with 'EXP-'", ["EXP-"]),
        ('Mentions "Lisbon" twice: "Lisbon"', ["Lisbon"]),
        ("the report is filed", []),  # no value to look for
        ("total 473.43 EUR, currency EUR", ["473.43", "EUR"]),  # once each
        ("step2 ran at v3.1", []),  # digits inside words are no values
    ],
)
def test_the_values_a_criterion_names(criterion: str, expected: list[str]) -> None:
    assert terms(criterion) == expected


REPORT = {
    "report": {"total": 473.43, "currency": "EUR", "cost_centre": "CC-4410", "note": "Lisbon trip"}
}


@pytest.mark.parametrize(
    ("criteria", "met", "missing"),
    [
        (["Filed in EUR against CC-4410 for 473.43"], True, []),
        (["Filed in USD"], False, ["'Filed in USD': nothing the run delivered holds 'USD'"]),
        (["total 473.430"], True, []),  # numbers compare as numbers
        (["mentions 'lisbon'"], True, []),  # a word of a text field, any case
        (["mentions 'lis'"], False, ["\"mentions 'lis'\": nothing the run delivered holds 'lis'"]),
        # a number is no part of an identifier, another number or a word (issue 12's benchmark)
        (["all 4 receipts"], False, ["'all 4 receipts': nothing the run delivered holds '4'"]),
        (["the report is filed"], True, []),  # names no value: not judged by rules
        (
            ["against CC-4411", "in EUR"],
            False,
            ["'against CC-4411': nothing the run delivered holds 'CC-4411'"],
        ),
    ],
)
def test_criteria_are_met_when_the_deliverables_hold_their_values(
    criteria: list[str], met: bool, missing: list[str]
) -> None:
    assert rule_verdict(criteria, REPORT)[0::2] == (met, missing)


def test_criteria_name_pinned_facts() -> None:
    run = Run(user_id="u", goal="g")
    add_criteria(
        run, ["In ${facts.currency} to ${facts.cost_centre}", "By ${facts.nope}"], by="user"
    )
    add_criteria(run, ["in ${facts.currency} to ${facts.cost_centre} ", ""], by="planner")  # dupes
    assert [c["by"] for c in run.success_criteria] == ["user", "user"]
    texts = criteria_texts(run, {"currency": "EUR", "cost_centre": "CC-4410"})
    assert texts == ["In EUR to CC-4410", "By ${facts.nope}"]


def test_a_plan_takes_at_most_ten_criteria_and_a_run_keeps_the_users_first() -> None:
    run = Run(user_id="u", goal="g")
    add_criteria(run, [f"user {i}" for i in range(8)], by="user")
    add_criteria(run, [f"planner {i}" for i in range(5)], by="planner")
    assert len(run.success_criteria) == MAX_CRITERIA
    assert [c["by"] for c in run.success_criteria].count("planner") == 2
    with pytest.raises(ValueError, match="success_criteria"):
        PlanSpec.model_validate(
            {
                "steps": [{"name": "a", "kind": "model", "instruction": "x"}],
                "success_criteria": ["x"] * 11,
            }
        )


def test_the_offline_check_is_the_rules() -> None:
    from worker.model_calls.offline import OfflineProvider
    from worker.model_calls.providers import ModelRequest

    payload = {"goal": "g", "criteria": ["Filed in USD"], "deliverables": REPORT, "answer": "a"}
    request = ModelRequest(purpose="check_goal", messages=[], payload=payload)
    answer = json.loads(OfflineProvider().complete(request).text)
    assert answer["met"] is False and answer["missing"] == [
        "'Filed in USD': nothing the run delivered holds 'USD'"
    ]


@pytest.mark.parametrize(
    ("criterion", "expected"),
    [
        ("a total under 500 EUR", ["EUR"]),
        ("at least 3 receipts", []),
        ("no more than 1,000.50 and exactly 7", ["7"]),
        ("total <= 20 and >= 5", []),
        ("all 4 receipts", ["4"]),
    ],
)
def test_a_bound_is_no_value_to_deliver(criterion: str, expected: list[str]) -> None:
    assert terms(criterion) == expected


# --- a model restating what it was told delivers nothing (issue 31, item 4) ------------------


def _node(id_: int, name: str, kind: str, tools: list[str] | None = None) -> Step:
    return Step(
        id=id_,
        run_id=1,
        plan_version=1,
        position=id_,
        name=name,
        kind=kind,
        tool="t" if kind == "tool" else None,
        tools=tools or [],
        status="succeeded",
    )


def test_a_model_step_that_read_nothing_from_outside_restates() -> None:
    steps = [
        _node(1, "plan", "model"),  # SmolLM2's two steps on "Draft a note to ... ACME-1001"
        _node(2, "goal", "model"),
        _node(3, "lookup", "tool"),
        _node(4, "write", "model"),  # waits for the lookup through `between`
        _node(5, "between", "model"),
        _node(6, "caller", "model", tools=["draft_note"]),  # offered a tool: may have read
        _node(7, "answer", "human"),
        _node(8, "after_answer", "model"),
    ]
    after = {2: (1,), 4: (5,), 5: (3,), 8: (7,)}
    assert restating(steps, after) == {"plan", "goal"}


def test_a_given_value_only_restated_by_a_model_is_not_delivered() -> None:
    criteria = ["The note about ACME-1001 is drafted to its account manager."]
    written = {"goal": {"text": "2. plan a note to customer ACME-1001"}}
    given = given_values("Draft a note to the account manager of customer ACME-1001", {})
    assert "ACME-1001" in given
    met, _, missing = rule_verdict(criteria, written, given=given, restating=frozenset({"goal"}))
    assert not met and "only restated" in missing[0]
    # the same text from a step that read the world (or with nothing given) is evidence
    assert rule_verdict(criteria, written, given=given)[0]
    assert rule_verdict(criteria, written, restating=frozenset({"goal"}))[0]


def test_a_value_the_run_worked_out_counts_from_a_models_text_with_the_given_ones() -> None:
    given = given_values("Add up my receipts", {"currency": "eur"})
    written = {"sum": {"text": "The total is 42 EUR"}}
    restating_sum = frozenset({"sum"})
    # 42 was worked out: the answer delivers the criterion, its given EUR with it
    assert rule_verdict(["The total is 42 EUR."], written, given=given, restating=restating_sum)[0]
    # a criterion of given values alone needs a step that read the world
    told = ["The report is filed in EUR."]
    assert not rule_verdict(told, written, given=given, restating=restating_sum)[0]
    filed = {**written, "file": {"currency": "EUR"}}  # a tool filed it in EUR
    assert rule_verdict(told, filed, given=given, restating=restating_sum)[0]
