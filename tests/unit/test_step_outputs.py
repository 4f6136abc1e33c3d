"""A model step's declared `output` (`models.plans.step_outputs`): the plan field, the answer check,
the schemas that ask for it, the offline provider's answer and the fake server's; no services."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from models.errors import InvalidPlan, InvalidStepOutput
from models.plans.plans import parse_plan
from models.plans.step_outputs import (
    MAX_OUTPUT_FIELDS,
    output_schema,
    output_spec_schema,
    parse_output,
)
from models.review.drafts import spec_of
from models.tables import Step
from ops.fake_provider import completion_body, ok
from worker.execution.attempts import Outcome
from worker.execution.step_turns import turn_text
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.offline_fields import labelled, offline_fields
from worker.model_calls.prompts import plan_schema, replan_prompt, step_prompt
from worker.model_calls.providers import ModelRequest

OUTPUT = {"total": "number", "currency": "string", "lines": "integer", "paid": "boolean"}
MODEL = {"name": "read", "kind": "model", "instruction": "Read the total"}
TOOLS = ["noop", "echo"]


def step_row(**fields: Any) -> Step:
    values: dict[str, Any] = {"run_id": 1, "plan_version": 1, "position": 0, **MODEL, **fields}
    return Step(**values)


# -- the answer check ----------------------------------------------------------------------------

GOOD = '{"total": 473.43, "currency": "EUR", "lines": 4, "paid": false}'


def test_an_answer_that_fits_becomes_its_fields_in_the_declared_order() -> None:
    answer = '{"paid": false, "lines": 4.0, "currency": "EUR", "total": 473.43}'
    fields = parse_output(answer, OUTPUT)
    assert fields == {"total": 473.43, "currency": "EUR", "lines": 4, "paid": False}
    assert list(fields) == list(OUTPUT) and type(fields["lines"]) is int  # 4.0 is an integer
    assert parse_output('{"total": 12}', {"total": "number"}) == {"total": 12}


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ("The total is 473.43 EUR", "output: the answer is not JSON"),
        ('{"total": 473.43, "currency": "EUR"', "output: the answer is not JSON"),
        ('{"total": NaN, "currency": "EUR", "lines": 1, "paid": true}', "NaN is not a JSON"),
        ('{"total": 1e999, "currency": "EUR", "lines": 1, "paid": true}', "must be finite"),
        ("[473.43]", "output: expected a JSON object, got [473.43]"),
        ('{"total": 473.43}', "output: missing 'currency', 'lines', 'paid'; declared: total, "),
        (GOOD[:-1] + ', "note": "ok"}', "output: 'note' not declared; declared: total, currency"),
        (GOOD.replace("473.43", '"473.43"'), 'output.total: expected a number, got "473.43"'),
        (GOOD.replace("473.43", "true"), "output.total: expected a number, got true"),
        (GOOD.replace('"EUR"', "978"), "output.currency: expected a text, got 978"),
        (GOOD.replace('"EUR"', '"E\\u0000UR"'), "output.currency: NUL characters"),
        (GOOD.replace("4,", "4.5,"), "output.lines: expected a whole number, got 4.5"),
        (GOOD.replace("4,", "true,"), "output.lines: expected a whole number, got true"),
        (GOOD.replace("false", '"no"'), 'output.paid: expected true or false, got "no"'),
        (GOOD.replace("false", "0"), "output.paid: expected true or false, got 0"),
    ],
)
def test_an_answer_that_does_not_fit_is_refused_naming_the_field(answer: str, reason: str) -> None:
    with pytest.raises(InvalidStepOutput) as refused:
        parse_output(answer, OUTPUT)
    assert reason in str(refused.value)


# -- the plan field -------------------------------------------------------------------------------


def test_a_model_step_may_declare_its_output_and_a_later_step_refer_to_a_field() -> None:
    use = {"name": "use", "kind": "tool", "tool": "echo", "args": {"value": "${steps.read.total}"}}
    plan = parse_plan({"steps": [{**MODEL, "output": OUTPUT}, use]}, tools=TOOLS)
    assert plan.steps[0].output == OUTPUT and plan.steps[1].output is None
    again = parse_plan(plan.model_dump(), tools=TOOLS)  # what a plan dump holds parses again
    assert again == plan


@pytest.mark.parametrize(
    ("step", "named"),
    [
        (
            {"name": "t", "kind": "tool", "tool": "noop", "output": {"a": "string"}},
            "step 't': 'output' is for kind 'model' steps only",
        ),
        ({**MODEL, "output": {"total": "float"}}, "steps.0.output.total: Input should be 'string'"),
        ({**MODEL, "output": {"Total": "number"}}, "steps.0.output.Total"),
        ({**MODEL, "output": {"a-b": "number"}}, "steps.0.output.a-b"),
        ({**MODEL, "output": {}}, "steps.0.output: Dictionary should have at least 1 item"),
        ({**MODEL, "output": ["total"]}, "steps.0.output: Input should be a valid dictionary"),
        (
            {**MODEL, "output": {f"f{i}": "string" for i in range(MAX_OUTPUT_FIELDS + 1)}},
            f"steps.0.output: Dictionary should have at most {MAX_OUTPUT_FIELDS} items",
        ),
    ],
)
def test_a_bad_output_is_refused_naming_the_step_and_what_is_allowed(
    step: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidPlan) as refused:
        parse_plan({"steps": [step]}, tools=TOOLS)
    assert named in str(refused.value)
    if "float" in json.dumps(step):
        assert "'number', 'integer' or 'boolean'" in str(refused.value)


SPEC_CASES: list[Any] = [
    {"total": "number"},
    OUTPUT,
    {},
    {"total": "float"},
    {"Total": "number"},
    {"total": None},
    {f"f{i}": "string" for i in range(MAX_OUTPUT_FIELDS)},
    {f"f{i}": "string" for i in range(MAX_OUTPUT_FIELDS + 1)},
]


@pytest.mark.parametrize("output", SPEC_CASES)
def test_the_api_spec_of_output_allows_exactly_what_a_plan_accepts(output: Any) -> None:
    schema_says = Draft202012Validator(output_spec_schema()).is_valid(output)
    try:
        parse_plan({"steps": [{**MODEL, "output": output}]}, tools=TOOLS)
    except InvalidPlan:
        accepted = False
    else:
        accepted = True
    assert schema_says == accepted


def test_the_planners_schema_offers_output_on_model_steps_only() -> None:
    validator = Draft202012Validator(plan_schema(["echo"]))
    tool = {"name": "t", "kind": "tool", "tool": "echo", "args": {}}
    assert validator.is_valid({"steps": [{**MODEL, "output": {"total": "number"}}]})
    assert not validator.is_valid({"steps": [{**MODEL, "output": {"total": "float"}}]})
    assert not validator.is_valid({"steps": [{**tool, "output": {"total": "number"}}]})


def test_the_edit_draft_and_the_replan_prompt_keep_a_steps_output() -> None:
    row = step_row(id=1, output=OUTPUT, status="failed", error="output.total: expected")
    draft = spec_of(row, [])
    assert draft["output"] == OUTPUT
    assert parse_plan({"steps": [draft]}, tools=TOOLS).steps[0].output == OUTPUT
    assert "output" not in spec_of(step_row(id=2), [])
    prompt = replan_prompt("goal", [], row)
    assert prompt.payload["failed_step"]["output"] == OUTPUT
    (again,) = json.loads(OfflineProvider().complete(_request("replan", prompt.payload)).text)[
        "steps"
    ]
    assert again["output"] == OUTPUT and again["kind"] == "model"


# -- asking for it --------------------------------------------------------------------------------


def test_a_step_with_output_asks_for_json_of_its_fields() -> None:
    prompt = step_prompt("Read the total", {}, None, OUTPUT)
    assert prompt.json_schema == output_schema(OUTPUT)
    assert prompt.json_schema["required"] == list(OUTPUT)
    assert prompt.json_schema["additionalProperties"] is False
    assert prompt.payload["output"] == OUTPUT
    assert "total (a number), currency (a text), lines (a whole number)" in prompt.task
    assert "JSON object only" in prompt.instructions
    plain = step_prompt("Say hello", {})
    assert plain.json_schema is None and "output" not in plain.payload
    assert Draft202012Validator(output_schema(OUTPUT)).is_valid(json.loads(GOOD))
    assert not Draft202012Validator(output_schema(OUTPUT)).is_valid({"total": 1})


def test_the_turn_of_a_step_with_output_is_its_fields_as_json() -> None:
    fields = {"total": 473.43, "currency": "EUR"}
    turn = turn_text(step_row(output=OUTPUT), Outcome("succeeded", fields))
    assert json.loads(turn) == fields
    assert turn_text(step_row(), Outcome("succeeded", {"text": "hi"})) == "hi"


# -- the offline provider and the fake server -----------------------------------------------------


def _request(purpose: Any, payload: dict[str, Any], **extra: Any) -> ModelRequest:
    messages = [{"role": "user", "content": "x"}]
    return ModelRequest(purpose=purpose, messages=messages, payload=payload, **extra)


CONTEXT = {
    "instruction": "Read what was filed: 473.43 EUR to CC-4410 on 2026-10-14",
    "facts": {"currency": "EUR", "lines": "4"},
    "results": {
        "convert": {"total": 473.43, "lines": [{"amount": 412.5}]},
        "attach": {"attachments": ["att-1"], "paid": True, "total": "not this one"},
    },
}


@pytest.mark.parametrize(
    ("output", "fields"),
    [
        ({"currency": "string", "lines": "integer"}, {"currency": "EUR", "lines": 4}),  # facts
        ({"total": "number", "paid": "boolean"}, {"total": 473.43, "paid": True}),  # results
        ({"amount": "number"}, {"amount": 412.5}),  # at any depth of a result
        ({"total": "string"}, {"total": "not this one"}),  # the first of its type, by step name
        (
            {"cost_centre": "string", "date": "string"},
            {"cost_centre": "CC-4410", "date": "2026-10-14"},
        ),
        ({"missing": "number", "currency": "number"}, {}),  # found nowhere: left out, not made up
    ],
)
def test_the_offline_answer_finds_each_field_by_plain_rules_or_leaves_it_out(
    output: dict[str, str], fields: dict[str, Any]
) -> None:
    assert offline_fields(output, CONTEXT) == fields
    completion = OfflineProvider().complete(_request("step", {**CONTEXT, "output": output}))
    assert json.loads(completion.text) == fields and completion.offline
    if fields == {}:
        with pytest.raises(InvalidStepOutput, match="missing 'missing', 'currency'"):
            parse_output(completion.text, output)
    else:
        assert parse_output(completion.text, output) == fields


INVOICE = {"total": "number", "currency": "string"}  # docs/concepts/plans.md, "Typed answers"


@pytest.mark.parametrize(
    ("payload", "fields"),
    [
        # the goal states the invoice (issue 31: the documented example escalated offline)
        (
            {
                "instruction": "Read the total and currency of the invoice.",
                "goal": "Read this invoice: Hotel Lisboa, 3 nights, total 473.43 EUR",
            },
            {"total": 473.43, "currency": "EUR"},
        ),
        # the instruction before the goal; a value written after the field's name
        (
            {"instruction": "total: €1,234.50, currency = USD", "goal": "total 9 EUR"},
            {"total": 1234.50, "currency": "USD"},
        ),
        # a pinned fact before either
        (
            {"instruction": "total 473.43 EUR", "facts": {"currency": "USD"}},
            {"total": 473.43, "currency": "USD"},
        ),
        # no invoice anywhere: nothing made up ("currency of the invoice" states none)
        ({"instruction": "Read the total and currency of the invoice.", "goal": "Read it"}, {}),
    ],
)
def test_the_offline_answer_reads_the_instruction_and_the_goal(
    payload: dict[str, Any], fields: dict[str, Any]
) -> None:
    assert offline_fields(INVOICE, payload) == fields


@pytest.mark.parametrize(
    ("name", "kind", "text", "values"),
    [
        ("total", "number", "the total and the total of $1,234.50, total: -3.", ["1234.50", "-3"]),
        ("total", "number", "total 2026-10-14, total 4x, totals 5", []),  # not a number alone
        ("cost_centre", "string", "file to Cost Centre: CC-4410.", ["CC-4410"]),
        ("vendor", "string", 'vendor = "Hotel Lisboa", vendor Lisboa', ["Hotel Lisboa"]),
        ("paid", "boolean", "paid: yes", ["yes"]),
    ],
)
def test_a_value_is_labelled_by_the_fields_name(
    name: str, kind: str, text: str, values: list[str]
) -> None:
    assert labelled(name, kind, text) == values


def test_a_boolean_field_takes_true_false_yes_no_written_as_text() -> None:
    paid = {"paid": "boolean"}
    assert offline_fields(paid, {"instruction": "paid: yes"}) == {"paid": True}
    assert offline_fields(paid, {"instruction": "x", "facts": {"paid": "false"}}) == {"paid": False}
    assert offline_fields(paid, {"instruction": "paid: maybe"}) == {}


def test_the_fake_server_answers_a_step_schema_with_a_placeholder_of_each_type() -> None:
    schema = output_schema(OUTPUT)
    body = {
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "step", "schema": schema},
        }
    }
    content = completion_body(ok(), body)["choices"][0]["message"]["content"]
    assert parse_output(content, OUTPUT) == {
        "total": 1.5,
        "currency": "fake",
        "lines": 1,
        "paid": True,
    }
    assert completion_body(ok(), {})["choices"][0]["message"]["content"] == "fake answer"
