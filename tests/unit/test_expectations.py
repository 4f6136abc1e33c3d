"""Expectations on a step's result (`models.plans.expectations`): the rules, the errors of bad ones,
the schema the planner and the API are given, and the outcome the worker makes of them."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from api.openapi import walk
from models.errors import InvalidPlan
from models.patterns import KEY_PATH_PATTERN
from models.plans.expectations import (
    MAX_STEP_EXPECTATIONS,
    SHOWN_VALUE_MAX_CHARS,
    Expectation,
    expect_schema,
    loaded,
    stored,
    unmet,
)
from models.plans.plans import parse_plan
from models.tables import Step
from worker.execution.steps import checked_outcome
from worker.model_calls.prompts import plan_schema

RESULT = {
    "total": 473.43,
    "count": 3,
    "currency": "EUR",
    "approved": True,
    "note": None,
    "receipt": {"total": 12, "lines": [{"amount": 5}, {"amount": "7"}]},
}


def one(data: dict[str, Any]) -> Expectation:
    return Expectation.model_validate(data)


@pytest.mark.parametrize(
    ("expectation", "reason"),
    [
        ({"key": "total", "present": True}, None),
        ({"key": "note", "present": True}, None),  # null is a value: the key is there
        ({"key": "missing", "present": True}, "missing: expected present, but it is missing"),
        ({"key": "total", "min": 0, "max": 500}, None),
        ({"key": "total", "min": 473.43, "max": 473.43}, None),  # both bounds inclusive
        ({"key": "total", "max": 473.42}, "total: expected a number <= 473.42, got 473.43"),
        ({"key": "count", "min": 4}, "count: expected a number >= 4, got 3"),
        ({"key": "count", "min": 3}, None),
        ({"key": "count", "max": 10**400}, None),  # any JSON number, not only a float's
        ({"key": "approved", "min": 0}, "got true, which is not a number"),  # no bool is 1
        ({"key": "currency", "max": 10}, 'got "EUR", which is not a number'),
        ({"key": "receipt.lines.1.amount", "min": 0}, 'got "7", which is not a number'),
        ({"key": "note", "min": 0}, "got null, which is not a number"),
        ({"key": "currency", "in": ["EUR", "USD"]}, None),
        ({"key": "currency", "in": ["USD"]}, 'currency: expected one of ["USD"], got "EUR"'),
        ({"key": "count", "in": [3.0]}, None),  # 3 and 3.0 are one JSON number
        ({"key": "count", "in": ["3"]}, 'expected one of ["3"], got 3'),
        ({"key": "approved", "in": [1]}, "expected one of [1], got true"),  # True == 1 in Python
        ({"key": "approved", "in": [True]}, None),
        ({"key": "note", "in": [None]}, None),
        ({"key": "receipt.total", "min": 10, "max": 20}, None),
        ({"key": "receipt.lines.0.amount", "in": [5]}, None),
        ({"key": "receipt.lines.2.amount", "present": True}, "no item '2' in receipt.lines"),
        ({"key": "receipt.lines.x", "present": True}, "no item 'x' in receipt.lines"),
        ({"key": "receipt.sum", "present": True}, "no 'sum' in receipt; its keys: lines, total"),
        ({"key": "total.cents", "present": True}, "total is 473.43, which has no keys"),
        ({"key": "nope", "min": 0}, "no 'nope' in the result; its keys: approved, count"),
    ],
)
def test_each_test_is_met_or_says_why_not(expectation: dict[str, Any], reason: str | None) -> None:
    reasons = unmet([one(expectation)], RESULT)
    if reason is None:
        assert reasons == []
    else:
        assert len(reasons) == 1 and reason in reasons[0], reasons


def test_unmet_gives_one_reason_per_unmet_expectation_in_order() -> None:
    expect = [one({"key": "count", "min": 5}), one({"key": "total", "present": True})]
    expect.append(one({"key": "currency", "in": ["USD"]}))
    reasons = unmet(expect, RESULT)
    assert [r.split(":")[0] for r in reasons] == ["count", "currency"]
    assert unmet([], {}) == []


def test_a_long_value_is_shown_shortened() -> None:
    (reason,) = unmet([one({"key": "blob", "in": ["short"]})], {"blob": "x" * 5000})
    assert "(5,002 characters)" in reason
    assert len(reason) < SHOWN_VALUE_MAX_CHARS + 100


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"key": "t", "min": 5, "max": 1}, "", "'min' (5) is greater than 'max' (1)"),
        ({"key": "t"}, "", "exactly one test is needed (given: none)"),
        ({"key": "t", "present": True, "min": 1}, "", "(given: present and range)"),
        ({"key": "t", "in": [1], "max": 3}, "", "(given: range and in)"),
        ({"key": "t", "present": False}, "", "'present' may only be true"),
        ({"key": "t", "equals": 3}, "", "unknown 'equals'; allowed: 'key' and one test"),
        ({"key": "t", "min": None, "max": 3}, "", "'min' may not be null"),
        ({"key": "t", "min": True}, "min", "a number is needed, not true"),
        ({"key": "t", "max": "3"}, "max", 'a number is needed, not "3"'),
        ({"key": "t", "min": float("nan")}, "min", "a finite number is needed, not nan"),
        ({"key": "t", "present": 1}, "present", "valid boolean"),
        ({"key": "t", "in": []}, "in", "at least 1 item"),
        ({"key": "t", "in": [[1]]}, "in.0", "a text, number, boolean or null is needed, not [1]"),
        ({"key": "t", "in": ["x" * 1001]}, "in.0", "at most 1000 characters (got 1001)"),
        ({"key": "a..b", "present": True}, "key", "should match pattern"),
        ({"key": "", "present": True}, "key", "should match pattern"),
        ({"present": True}, "key", "Field required"),
    ],
)
def test_a_bad_expectation_is_refused_naming_the_field_and_what_is_allowed(
    data: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        one(data)
    (error, *_) = refused.value.errors()
    assert ".".join(str(part) for part in error["loc"]) == field, error
    assert message in error["msg"], error


def tool_step(**more: Any) -> dict[str, Any]:
    return {"name": "a", "kind": "tool", "tool": "echo", "args": {"value": 1}, **more}


def test_a_plan_with_a_bad_expectation_is_refused_naming_the_step_and_field() -> None:
    bad = tool_step(
        expect=[{"key": "value", "present": True}, {"key": "value", "min": 2, "max": 1}]
    )
    with pytest.raises(InvalidPlan, match=r"steps\.0\.expect\.1: .*'min' \(2\) is greater"):
        parse_plan({"steps": [bad]}, tools=["echo"])
    many = tool_step(expect=[{"key": "value", "present": True}] * (MAX_STEP_EXPECTATIONS + 1))
    with pytest.raises(InvalidPlan, match=r"steps\.0\.expect: List should have at most 20"):
        parse_plan({"steps": [many]}, tools=["echo"])


def test_expectations_round_trip_through_a_plan_and_a_step_row() -> None:
    expect = [
        {"key": "value", "min": 0},
        {"key": "value.total", "min": 1.5, "max": 10},
        {"key": "value", "in": ["EUR", 1, True, None]},
        {"key": "value", "present": True},
    ]
    plan = parse_plan({"steps": [tool_step(expect=expect)]}, tools=["echo"])
    assert stored(plan.steps[0].expect) == expect  # as written: `in`, no nulls
    assert parse_plan(plan.model_dump(), tools=["echo"]) == plan  # what the API passes on
    assert loaded(stored(plan.steps[0].expect)) == plan.steps[0].expect
    assert parse_plan({"steps": [tool_step()]}, tools=["echo"]).steps[0].expect == []


SCHEMA_CASES = [
    {"key": "t", "present": True},
    {"key": "a.b.0", "min": 0},
    {"key": "t", "max": 2.5},
    {"key": "t", "min": -1, "max": 1},
    {"key": "t", "in": ["x", 1, 1.5, False, None]},
    {"key": "t"},
    {"key": "t", "present": False},
    {"key": "t", "present": True, "max": 1},
    {"key": "t", "min": True},
    {"key": "t", "min": "1"},
    {"key": "t", "min": None},
    {"key": "t", "in": []},
    {"key": "t", "in": [{"a": 1}]},
    {"key": "t", "other": 1},
    {"key": "t.", "present": True},
    {"min": 1},
]


@pytest.mark.parametrize("case", SCHEMA_CASES)
def test_the_schema_allows_exactly_what_is_accepted(case: dict[str, Any]) -> None:
    """What the planner's schema and the API's spec say an expectation is (`expect_schema`) is
    what `Expectation` accepts (min <= max aside, which the schema states in words)."""
    schema_says = Draft202012Validator(expect_schema()).is_valid([case])
    try:
        one(case)
    except ValidationError:
        accepted = False
    else:
        accepted = True
    assert schema_says == accepted


def test_the_planners_schema_offers_expect_on_either_kind_of_step() -> None:
    validator = Draft202012Validator(plan_schema(["echo"]))
    model = {"name": "m", "kind": "model", "instruction": "Sum it"}
    for step in (tool_step(), model):
        assert validator.is_valid({"steps": [{**step, "expect": [{"key": "text", "min": 0}]}]})
        assert not validator.is_valid({"steps": [{**step, "expect": [{"key": "text"}]}]})


def test_the_planners_schema_has_no_pattern_escape_a_local_models_grammar_cannot_read() -> None:
    """llama-cpp-python's server (`AGENTQ_STRUCTURED_OUTPUT=json_object`) turns the schema into
    a grammar; a `\\.` in a pattern made one it could not parse, and the server crashed."""
    patterns = [node["pattern"] for node in walk(plan_schema(["echo"])) if "pattern" in node]
    assert KEY_PATH_PATTERN in patterns
    assert all("\\" not in pattern for pattern in patterns), patterns


def step_row(expect: list[dict[str, Any]]) -> Step:
    return Step(
        id=7, run_id=1, plan_version=1, position=0, name="total", kind="tool", expect=expect
    )


def test_a_result_that_meets_its_expectations_succeeds_and_one_that_misses_fails() -> None:
    row = step_row([{"key": "total", "min": 0, "max": 500}, {"key": "currency", "in": ["EUR"]}])
    met = checked_outcome(row, {"total": 473.43, "currency": "EUR"})
    assert (met.kind, met.result, met.error) == (
        "succeeded",
        {"total": 473.43, "currency": "EUR"},
        "",
    )
    missed = checked_outcome(row, {"total": 612.5, "currency": "EUR"})
    assert (missed.kind, missed.result) == ("failed", None)  # failed for good, not a retry
    assert missed.error == (
        "step 'total': unmet expectation: total: expected a number in [0, 500], got 612.5"
    )
    both = checked_outcome(row, {"currency": "USD"})
    assert both.error.count("expected") == 2 and 'got "USD"' in both.error
    assert checked_outcome(step_row([]), {"anything": 1}).kind == "succeeded"


def test_a_step_row_holding_no_expectation_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValidationError):
        checked_outcome(step_row([{"key": "total", "between": [0, 1]}]), {"total": 1})
