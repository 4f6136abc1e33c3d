"""References in tool arguments: `${steps.NAME.KEY}`, `${steps.NAME}` and `${facts.KEY}`."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from models.errors import ToolArgumentsError
from models.plans.references import references, resolve

RESULTS: dict[str, dict[str, Any]] = {
    "receipts": {
        "receipts": [{"item": "hotel", "amount": 412.5}],
        "month": "2026-10",
        "currency": "USD",
    },
    "rate": {"rate": 0.92, "source": "cached monthly table 2026-10"},
    "flags": {"ok": True, "count": 3, "nothing": None},
}
FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}


def test_whole_string_references_keep_their_json_types() -> None:
    args = {
        "receipts": "${steps.receipts.receipts}",
        "rate": "${steps.rate.rate}",
        "ok": "${steps.flags.ok}",
        "count": "${steps.flags.count}",
        "nothing": "${steps.flags.nothing}",
        "currency": "${facts.currency}",
        "everything": "${steps.rate}",
    }
    assert resolve(args, results=RESULTS, facts=FACTS) == {
        "receipts": [{"item": "hotel", "amount": 412.5}],
        "rate": 0.92,
        "ok": True,
        "count": 3,
        "nothing": None,
        "currency": "EUR",
        "everything": {"rate": 0.92, "source": "cached monthly table 2026-10"},
    }


def test_references_inside_text_are_interpolated() -> None:
    args = {"title": "Trip ${facts.trip} at ${steps.rate.rate} (${steps.flags.ok})"}
    resolved = resolve(args, results=RESULTS, facts=FACTS)
    assert resolved == {"title": "Trip lisbon-2026-10 at 0.92 (true)"}


def test_lists_and_dicts_are_walked_and_keys_and_other_values_left_alone() -> None:
    args = {
        "nested": {
            "${facts.currency}": ["${facts.cost_centre}", 1, {"m": "${steps.receipts.month}"}]
        },
        "number": 5,
        "plain": "no reference here, nor in ${HOME}",
    }
    assert resolve(args, results=RESULTS, facts=FACTS) == {
        "nested": {"${facts.currency}": ["CC-4410", 1, {"m": "2026-10"}]},
        "number": 5,
        "plain": "no reference here, nor in ${HOME}",
    }


def test_resolve_copies_and_does_not_mutate() -> None:
    results = copy.deepcopy(RESULTS)
    args = {"receipts": "${steps.receipts.receipts}", "again": ["${facts.trip}"]}
    original = copy.deepcopy(args)
    resolved = resolve(args, results=results, facts=FACTS)
    resolved["receipts"][0]["amount"] = 0
    assert results == RESULTS
    assert args == original


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        (
            "${steps.convert.total}",
            r"reference \$\{steps\.convert\.total\}: no succeeded step 'convert'; "
            r"succeeded steps: flags, rate, receipts",
        ),
        (
            "${steps.rate.total}",
            r"reference \$\{steps\.rate\.total\}: step 'rate' returned no 'total'; "
            r"its keys: rate, source",
        ),
        (
            "Trip ${facts.project}",
            r"reference \$\{facts\.project\}: no fact 'project'; "
            r"facts: cost_centre, currency, trip",
        ),
    ],
)
def test_missing_steps_keys_and_facts_are_named(reference: str, expected: str) -> None:
    with pytest.raises(ToolArgumentsError, match=expected):
        resolve({"x": [reference]}, results=RESULTS, facts=FACTS)


def test_nothing_available_says_none() -> None:
    with pytest.raises(ToolArgumentsError, match="succeeded steps: none"):
        resolve({"x": "${steps.receipts}"}, results={}, facts={})


@pytest.mark.parametrize(
    "text", ["${steps.}", "${steps.a.b.c}", "${facts.}", "${facts.a.b}", "x ${steps.a b}"]
)
def test_malformed_references_are_refused(text: str) -> None:
    with pytest.raises(ToolArgumentsError, match="malformed reference"):
        resolve({"x": text}, results=RESULTS, facts=FACTS)
    with pytest.raises(ToolArgumentsError, match="malformed reference"):
        references({"x": text})


def test_references_lists_step_names_only() -> None:
    args = {
        "a": "${steps.receipts.receipts}",
        "b": ["${steps.rate}", {"c": "total ${steps.convert.total} in ${facts.currency}"}],
        "d": 4,
    }
    assert references(args) == {"receipts", "rate", "convert"}
    assert references({"a": "${facts.trip}", "b": []}) == set()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), json_values, max_size=5))
def test_arguments_without_references_come_back_unchanged(args: dict[str, Any]) -> None:
    def has_reference(value: Any) -> bool:
        return "${steps." in repr(value) or "${facts." in repr(value)

    if not has_reference(args):
        assert resolve(args, results=RESULTS, facts=FACTS) == args
        assert references(args) == set()
