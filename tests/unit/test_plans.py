"""Plan validation: malformed plans are refused whole, with the step and field named."""

from __future__ import annotations

import json

import pytest

from models.errors import ConfigurationError, InvalidPlan
from models.plans import parse_plan
from models.reviews import answer_from_text
from ops.cli import parse_facts

TOOLS = ["noop", "convert"]


def test_valid_plan_from_json_text() -> None:
    plan = parse_plan(
        json.dumps(
            {
                "steps": [
                    {"name": "a", "kind": "tool", "tool": "noop"},
                    {
                        "name": "b",
                        "kind": "tool",
                        "tool": "convert",
                        "args": {"x": "${steps.a.ok}"},
                    },
                    {"name": "c", "kind": "model", "instruction": "say hi"},
                ]
            }
        ),
        tools=TOOLS,
    )
    assert [s.name for s in plan.steps] == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ("", "invalid plan"),
        ("   ", "invalid plan"),
        ('{"steps": [{"name": "a", "kind": "tool", "tool": "noop"}', "invalid plan"),
        ({"steps": []}, "steps: List should have at least 1 item"),
        ({"plan": []}, "steps: Field required"),
        ({"steps": [{"name": "A b", "kind": "tool", "tool": "noop"}]}, "steps.0.name"),
        ({"steps": [{"name": "a", "kind": "tool"}]}, "needs a 'tool'"),
        ({"steps": [{"name": "a", "kind": "model", "tool": "noop"}]}, "takes no 'tool'"),
        ({"steps": [{"name": "a", "kind": "shell", "tool": "noop"}]}, "steps.0.kind"),
        ({"steps": [{"name": "a", "kind": "tool", "tool": "rm"}]}, "unknown tool 'rm'"),
        (
            {
                "steps": [
                    {"name": "a", "kind": "tool", "tool": "noop", "args": {"x": "${steps.b}"}},
                    {"name": "b", "kind": "tool", "tool": "noop"},
                ]
            },
            "refers to step 'b'",
        ),
    ],
)
def test_invalid_plans_are_refused(data: object, message: str) -> None:
    with pytest.raises(InvalidPlan, match=message):
        parse_plan(data, tools=TOOLS)


def test_replan_may_refer_to_earlier_results() -> None:
    spec = {"steps": [{"name": "r", "kind": "tool", "tool": "noop", "args": {"x": "${steps.a.k}"}}]}
    assert parse_plan(spec, tools=TOOLS, earlier={"a"}).steps[0].name == "r"


def test_malformed_reference_is_refused_at_plan_time() -> None:
    spec = {"steps": [{"name": "r", "kind": "tool", "tool": "noop", "args": {"x": "${steps.}"}}]}
    with pytest.raises(InvalidPlan, match=r"steps.0.args: malformed reference"):
        parse_plan(spec, tools=TOOLS)


@pytest.mark.parametrize(
    ("text", "returns", "expected"),
    [
        ("0.95", ("rate",), {"rate": 0.95}),
        ('{"rate": 0.9, "source": "ECB"}', ("rate",), {"rate": 0.9, "source": "ECB"}),
        ("yes please", ("a", "b"), {"answer": "yes please"}),
        ("12", (), {"answer": 12}),
    ],
)
def test_reviewer_answer_shapes(text: str, returns: tuple[str, ...], expected: object) -> None:
    assert answer_from_text(text, returns=returns) == expected


def test_pinned_facts_parse_and_refuse() -> None:
    assert parse_facts(["currency=EUR", "cost_centre=CC-4410"]) == {
        "currency": "EUR",
        "cost_centre": "CC-4410",
    }
    for bad in ("currency", "Currency=EUR", "x=", "=EUR"):
        with pytest.raises(ConfigurationError, match="KEY=VALUE"):
            parse_facts([bad])
