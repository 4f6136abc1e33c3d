"""The values a goal states, found by plain rules (`models.plans.goal_values`), and what a
submission pins of them; no services."""

from __future__ import annotations

import re

import pytest

from models.engine.runs import MAX_PINNED_FACTS
from models.patterns import FACT_KEY_PATTERN
from models.plans.goal_values import MAX_GOAL_VALUES, GoalValue, extract, pins

DEMO = "Submit 473.43 EUR to CC-4410"


@pytest.mark.parametrize(
    ("goal", "found"),
    [
        (DEMO, {"amount": "473.43", "currency": "EUR", "cost_centre": "CC-4410"}),
        (
            "File my Lisbon trip expense report in EUR to cost centre CC-4410",
            {"currency": "EUR", "cost_centre": "CC-4410"},
        ),
        ("File my Lisbon trip expense report", {}),
        ("Pay EUR 473.43 now", {"amount": "473.43", "currency": "EUR"}),
        ("Tip €12.50, or 12,50 € as they write it", {"amount": "12.50", "currency": "EUR"}),
        (
            "Send $1,234.50 and £3",
            {"amount_1": "1234.50", "currency_1": "USD", "amount_2": "3", "currency_2": "GBP"},
        ),
        ("Book 2026-10-14 for the 2026-10 trip", {"date": "2026-10-14", "month": "2026-10"}),
        ("Not a day: 2026-02-30, 2026-13-01, 2026-13", {}),
        ("Trip lisbon-2026-10, ref v2026-10-14x", {}),  # never read out of a longer word
        (
            "Order PO-778 against INV-2026 and ABC-12",
            {"purchase_order": "PO-778", "invoice": "INV-2026", "id": "ABC-12"},
        ),
        ("The API CEO said ALL and TOP", {}),  # capitals that are no currency code
        ("CC-4410 twice: CC-4410, and EUR, EUR", {"cost_centre": "CC-4410", "currency": "EUR"}),
        (
            "Convert 514.60 USD to EUR",  # two currencies: each numbered, none bare
            {"amount": "514.60", "currency_1": "USD", "currency_2": "EUR"},
        ),
        ("Version 3.5 of 2 tools, 40 items", {}),  # numbers without a currency are no amounts
    ],
)
def test_a_goal_states_these_values(goal: str, found: dict[str, str]) -> None:
    values = extract(goal)
    assert {v.key: v.value for v in values} == found
    assert [v.key for v in values] == list(found)  # in the order of the goal
    for value in values:
        assert goal[value.start :].startswith(value.quote)


def test_each_value_says_where_in_the_goal_it_was_read() -> None:
    assert extract("Pay €12.50 on 2026-10-14")[0] == GoalValue("amount", "12.50", "€12.50", 4)
    assert extract("Pay €12.50 on 2026-10-14")[2] == GoalValue(
        "date", "2026-10-14", "2026-10-14", 14
    )


def test_every_key_is_a_fact_key_and_a_long_goal_pins_at_most_the_cap() -> None:
    goal = " ".join(f"{n}.50 EUR for AB-{n:03d}" for n in range(100, 200))
    values = extract(goal)
    assert len(values) == MAX_GOAL_VALUES
    assert all(re.match(FACT_KEY_PATTERN, v.key) for v in values)


def test_nothing_is_pinned_unless_asked_but_what_was_found_is_shown() -> None:
    found = pins(DEMO, {"trip": "lisbon-2026-10"}, pin=False, room=MAX_PINNED_FACTS)
    assert found.found == {"amount": "473.43", "currency": "EUR", "cost_centre": "CC-4410"}
    assert found.pinned == {} and found.facts == {"trip": "lisbon-2026-10"}


def test_pinned_values_join_the_explicit_facts_which_always_win() -> None:
    explicit = {"currency": "USD", "cost_centre_code": "CC-4410"}
    made = pins(DEMO, explicit, pin=True, room=MAX_PINNED_FACTS)
    assert made.pinned == {"amount": "473.43"}  # CC-4410 is pinned already, under its own key
    assert made.overridden == {"currency": "EUR"}  # the explicit USD won
    assert made.facts == {**explicit, "amount": "473.43"}
    assert list(made.facts) == [*explicit, "amount"]  # the explicit ones first
    same = pins(DEMO, {"currency": "EUR"}, pin=True, room=MAX_PINNED_FACTS)
    assert same.overridden == {} and "currency" not in same.pinned  # agreeing is no override


def test_pinned_values_never_take_the_run_past_its_fact_cap() -> None:
    made = pins(DEMO, {"a": "1", "b": "2"}, pin=True, room=4)
    assert made.pinned == {"amount": "473.43", "currency": "EUR"}
    assert len(made.facts) == 4
    assert pins(DEMO, {"a": "1"}, pin=True, room=1).pinned == {}
