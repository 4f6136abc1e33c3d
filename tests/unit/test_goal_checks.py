"""The goal checks that need no model (issue 12, item 1): a run's deliverables against the facts
its user pinned (`models.goal_checks`)."""

from __future__ import annotations

from typing import Any

import pytest

from models.goal_checks import agrees, conflicts, deliverables
from models.tables import Step


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
