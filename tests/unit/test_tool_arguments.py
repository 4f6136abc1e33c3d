"""A tool's arguments checked against a JSON schema (`models.plans.tool_arguments.by_schema`, as
an MCP tool's are) in the same words as against a Python signature, and a `Tool` whose
`schema` says what it takes."""

from __future__ import annotations

from typing import Any

import pytest

from models.errors import ToolArgumentsError
from models.plans.tool_arguments import (
    ARG_ERRORS_SHOWN,
    Problem,
    by_schema,
    describe_parameters,
    rejected,
)
from models.plans.tools import Tool, ToolContext

REPORT = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 10},
        "amount": {"type": "number", "minimum": 0},
        "currency": {"enum": ["EUR", "USD"]},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
        "note": {"type": ["string", "null"]},
    },
    "required": ["title", "amount"],
    "additionalProperties": False,
    "$defs": {
        "line": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    },
}


def problems(args: dict[str, Any]) -> list[str]:
    return [str(p) for p in by_schema(REPORT, args)]


def test_valid_arguments_have_no_problem() -> None:
    assert problems({"title": "Lisbon", "amount": 3, "lines": [{"n": 1}, {"n": 2.0}]}) == []


def test_each_problem_names_its_field_and_the_value_given() -> None:
    assert problems({}) == ["amount: required but missing", "title: required but missing"]
    assert problems({"title": 5, "amount": -1, "currency": "GBP", "tip": 2}) == [
        "amount: is less than the minimum of 0 (got -1)",
        "currency: is not one of ['EUR', 'USD'] (got 'GBP')",
        "tip: not an argument this tool takes (got 2)",
        "title: should be of type 'string' (got 5)",
    ]
    assert problems({"title": "x" * 11, "amount": 1, "lines": [{"n": 1}, {"m": "a"}]}) == [
        "lines.1.n: required but missing",
        f"title: is too long (got {'x' * 11!r})",
    ]
    assert problems({"title": "t", "amount": 1, "note": 3}) == [
        "note: should be of type 'string' or 'null' (got 3)"
    ]


def test_a_long_value_is_shortened_in_a_problem() -> None:
    (problem,) = by_schema(REPORT, {"title": "t", "amount": "9" * 200})
    assert problem.field == "amount" and problem.why.endswith("...)") and len(problem.why) < 130


def test_a_refusal_names_the_tool_some_problems_and_what_it_takes() -> None:
    found = [Problem(f"f{i}", "required but missing") for i in range(ARG_ERRORS_SHOWN + 2)]
    message = rejected("mcp__x__report", REPORT, found)
    assert message.startswith("tool 'mcp__x__report' rejected its arguments: f0: required")
    assert "f4: required but missing; and 2 more. Takes: title: string, amount: number, " in message
    assert message.endswith("note: string or null (optional)")
    assert describe_parameters({"type": "object"}) == "none"


def _echo(ctx: ToolContext, **args: Any) -> dict[str, Any]:
    return {"got": args}


def test_a_tool_with_a_schema_is_checked_by_it_before_its_function_runs() -> None:
    tool = Tool("t_schema", "Echo.", _echo, ("got",), None, schema=REPORT)
    ctx = ToolContext(run_id=1, step_id=1, step_name="s", attempt=1, tries_of_name=1, facts={})
    assert tool.invoke(ctx, {"title": "a", "amount": 1}) == {"got": {"title": "a", "amount": 1}}
    assert tool.parameters_schema() == REPORT and tool.parameters_schema() is not REPORT
    assert tool.annotations == {}
    with pytest.raises(ToolArgumentsError, match="amount: should be of type 'number'"):
        tool.invoke(ctx, {"title": "a", "amount": "1"})
    with pytest.raises(ToolArgumentsError, match="amount: numbers must be finite"):
        tool.invoke(ctx, {"title": "a", "amount": float("nan")})
