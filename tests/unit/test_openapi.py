"""The spec states the server's rules (`api.openapi.state_rules`), checked on the spec itself;
tests/api/test_schema.py checks the server against it over HTTP with every schemathesis check."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from api.app import create_api
from api.openapi import JSON_VALUE, NO_NUL_PATTERN, walk
from models.engine.runs import FACT_VALUE_MAX_CHARS
from models.plans.tools import configured_tool_names
from models.settings import BUDGET_CEILINGS, get_settings


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return create_api().openapi()


def schemas(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for name, schema in spec["components"]["schemas"].items():
        if name != JSON_VALUE:
            yield from walk(schema)


def valid(spec: dict[str, Any], component: str, value: Any) -> bool:
    schema = {"$ref": f"#/components/schemas/{component}", "components": spec["components"]}
    return bool(Draft202012Validator(schema).is_valid(value))


def test_no_string_may_hold_nul_and_no_value_is_unconstrained(spec: dict[str, Any]) -> None:
    for node in schemas(spec):
        if node.get("type") == "string":
            assert {"pattern", "enum", "const", "format"} & node.keys(), node
            assert "\x00" not in node.get("enum", ()), node
        for prop in node.get("properties", {}).values():
            assert set(prop) - {"title", "description", "default"}, (node, prop)
    assert not valid(spec, "Respond", {"answer": {"k": ["fine", "not\x00fine"]}})
    assert not valid(spec, "Respond", {"answer": {"nul\x00key": 1}})
    assert valid(spec, "Respond", {"answer": {"k": ["fine", 1, None, {"x": True}]}})


def test_each_enabled_tool_is_one_step_shape_with_its_own_arguments(spec: dict[str, Any]) -> None:
    variants = spec["components"]["schemas"]["StepSpec"]["oneOf"]
    titles = {v["title"] for v in variants}
    assert titles == {"ModelStep", *(f"ToolStep_{name}" for name in configured_tool_names())}
    plan = {"steps": [{"name": "a", "kind": "tool", "tool": "sleep", "args": {"seconds": 1}}]}
    assert valid(spec, "PlanSpec", plan)
    for wrong in ({"seconds": "1"}, {"seconds": 61}, {}, {"seconds": 1, "extra": 1}):
        plan["steps"][0]["args"] = wrong
        assert not valid(spec, "PlanSpec", plan), wrong
    plan["steps"][0]["args"] = {"seconds": "${steps.earlier.seconds}"}  # a reference
    assert valid(spec, "PlanSpec", plan)
    assert not valid(spec, "PlanSpec", {"steps": [{"name": "a", "kind": "tool", "tool": "nope"}]})
    assert not valid(spec, "PlanSpec", {"steps": [{"name": "a", "kind": "model"}]})
    blank = {"steps": [{"name": "a", "kind": "model", "instruction": "   "}]}
    assert not valid(spec, "PlanSpec", blank)


def test_budgets_are_capped_by_the_operators_ceilings(spec: dict[str, Any]) -> None:
    budgets = spec["components"]["schemas"]["Budgets"]["properties"]
    settings = get_settings()
    for name, _, ceiling in BUDGET_CEILINGS:
        numeric = next(b for b in budgets[name]["anyOf"] if b.get("type") != "null")
        assert numeric["maximum"] == getattr(settings, ceiling)
    assert not valid(spec, "Budgets", {"cost_usd": False})
    assert valid(spec, "Budgets", {"tokens": 1000.0})  # an integer, for JSON Schema


def test_the_no_nul_pattern_means_what_it_says() -> None:
    assert re.search(NO_NUL_PATTERN, "any text, ünïcode too")
    assert not re.search(NO_NUL_PATTERN, "a\x00b")


def test_either_step_shape_may_name_the_steps_it_waits_for(spec: dict[str, Any]) -> None:
    model = {"name": "j", "kind": "model", "instruction": "join"}
    tool = {"name": "a", "kind": "tool", "tool": "sleep", "args": {"seconds": 0}}
    for after in ([], ["a", "b"], None):
        assert valid(spec, "PlanSpec", {"steps": [{**tool, "after": after}]}), after
        assert valid(spec, "PlanSpec", {"steps": [{**model, "after": after}]}), after
    for wrong in (["a", "a"], ["Not A Name"], "a", [1], [f"s{i}" for i in range(51)]):
        assert not valid(spec, "PlanSpec", {"steps": [{**tool, "after": wrong}]}), wrong
        assert not valid(spec, "PlanSpec", {"steps": [{**model, "after": wrong}]}), wrong
    described = spec["components"]["schemas"]["StepSpec"]["description"]
    assert "no cycle" in described and "waits for" in described and "400" in described
    versions = spec["components"]["schemas"]["PlanVersionOut"]
    assert {"after", "waves"} <= set(versions["required"])


def test_either_step_shape_may_declare_expectations_as_the_server_checks_them(
    spec: dict[str, Any],
) -> None:
    model = {"name": "j", "kind": "model", "instruction": "join"}
    tool = {"name": "a", "kind": "tool", "tool": "sleep", "args": {"seconds": 0}}
    good = [{"key": "slept_s", "min": 0, "max": 1}, {"key": "text", "present": True}]
    good.append({"key": "x.0.y", "in": ["a", 1, True, None]})
    for step in (model, tool):
        assert valid(spec, "PlanSpec", {"steps": [{**step, "expect": good}]})
        for wrong in ([{"key": "t"}], [{"key": "t", "min": "1"}], [{"key": "t", "max": None}]):
            assert not valid(spec, "PlanSpec", {"steps": [{**step, "expect": wrong}]}), wrong
        nul = [{"key": "t", "in": ["a\x00b"]}]
        assert not valid(spec, "PlanSpec", {"steps": [{**step, "expect": nul}]})
    assert "Expectation" not in spec["components"]["schemas"]  # pydantic's, which allows null
    described = spec["components"]["schemas"]["StepSpec"]["description"]
    assert "`min` is at most its `max`" in described
    step_out = spec["components"]["schemas"]["StepOut"]["properties"]
    assert step_out["expect"]["type"] == "array"


def test_a_model_step_may_declare_its_output_and_a_tool_step_may_not(spec: dict[str, Any]) -> None:
    model = {"name": "j", "kind": "model", "instruction": "read the total"}
    tool = {"name": "a", "kind": "tool", "tool": "sleep", "args": {"seconds": 0}}
    output = {"total": "number", "currency": "string"}
    assert valid(spec, "PlanSpec", {"steps": [{**model, "output": output}]})
    assert valid(spec, "PlanSpec", {"steps": [{**model, "output": None}]})
    for wrong in ({}, {"total": "float"}, {"Total": "number"}):
        assert not valid(spec, "PlanSpec", {"steps": [{**model, "output": wrong}]}), wrong
    assert not valid(spec, "PlanSpec", {"steps": [{**tool, "output": output}]})
    step_out = spec["components"]["schemas"]["StepOut"]["properties"]
    assert "output" in step_out


def test_a_submit_may_pin_the_goals_values_and_is_shown_them(spec: dict[str, Any]) -> None:
    submit = spec["components"]["schemas"]["RunSubmit"]["properties"]
    assert (
        submit["pin_from_goal"]["type"] == "boolean" and submit["pin_from_goal"]["default"] is False
    )
    assert valid(spec, "RunSubmit", {"goal": "Submit 473.43 EUR", "pin_from_goal": True})
    assert not valid(spec, "RunSubmit", {"goal": "x", "pin_from_goal": "yes"})
    shown = spec["components"]["schemas"]["GoalValuesOut"]["properties"]
    assert set(shown) == {"found", "pinned", "overridden"}
    facts = spec["components"]["schemas"]["RunSubmit"]["properties"]["facts"]
    (value,) = facts["patternProperties"].values()
    assert value["maxLength"] == FACT_VALUE_MAX_CHARS  # the one cap every submit path has
