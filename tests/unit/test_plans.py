"""Plan validation: malformed plans are refused whole, with the step and field named."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from models.errors import ConfigurationError, InvalidInput, InvalidPlan
from models.plans.plans import Splice, parse_plan
from models.plans.tools import argument_problems
from models.review.answers import answer_from_text
from models.tables import Step
from ops.inputs import parse_facts, read_plan_text

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


def done(id: int, name: str, status: str = "succeeded") -> Step:
    return Step(id=id, run_id=1, plan_version=1, position=0, name=name, kind="tool", status=status)


def test_replan_may_refer_to_what_the_failed_step_waited_for() -> None:
    spec = {"steps": [{"name": "r", "kind": "tool", "tool": "noop", "args": {"x": "${steps.a.k}"}}]}
    here = Splice([done(1, "a"), done(2, "f", "failed")], {1: (), 2: (1,)}, replaced=2)
    assert parse_plan(spec, tools=TOOLS, splice=here).steps[0].name == "r"
    with pytest.raises(InvalidPlan, match="refers to step 'a', which step 'r' does not wait for"):
        parse_plan(spec, tools=TOOLS, splice=Splice([done(1, "a")], {1: ()}))


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


@pytest.mark.parametrize("text", ["NaN", "-Infinity", '{"rate": Infinity}'])
def test_a_reviewer_answer_with_a_non_finite_number_is_refused(text: str) -> None:
    """Issue 11: the answer becomes a step's result, which later steps pass as tool arguments."""
    with pytest.raises(InvalidInput, match=r"respond: answer\.rate: numbers must be finite"):
        answer_from_text(text, returns=("rate",))


def test_pinned_facts_parse_and_refuse() -> None:
    assert parse_facts(["currency=EUR", "cost_centre=CC-4410"]) == {
        "currency": "EUR",
        "cost_centre": "CC-4410",
    }
    for bad in ("currency", "Currency=EUR", "=EUR"):
        with pytest.raises(ConfigurationError, match="KEY=VALUE"):
            parse_facts([bad])
    with pytest.raises(ConfigurationError, match="'x=': the value is empty"):
        parse_facts(["x="])
    with pytest.raises(ConfigurationError, match="given twice"):
        parse_facts(["k=a", "k=b"])
    assert parse_facts(["k=a", "k=a"]) == {"k": "a"}


def test_a_plan_named_dash_is_read_from_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--plan -` (run submit, review edit) reads stdin, as `-` means to cat and jq; a file
    named by its path is read as before, and stdin is not touched for it."""
    text = '{"steps": [{"name": "caf\u00e9", "kind": "tool", "tool": "noop"}]}'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("utf-8"))))
    (tmp_path / "plan.json").write_text("{}", encoding="utf-8")
    assert read_plan_text(tmp_path / "plan.json") == "{}"
    assert read_plan_text(Path("-")) == text
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode("latin-1"))))
    with pytest.raises(ConfigurationError, match=r"^--plan -: not UTF-8 text \(byte 24\)"):
        read_plan_text(Path("-"))


def test_plans_and_submissions_refuse_what_postgres_cannot_store() -> None:
    nul = {"steps": [{"name": "a", "kind": "tool", "tool": "echo", "args": {"value": "x\x00"}}]}
    with pytest.raises(InvalidPlan, match=r"plan\.steps\.0\.args\.value: NUL characters"):
        parse_plan(nul, tools=["echo"])
    lone = {"steps": [{"name": "a", "kind": "model", "instruction": "bad \udcff"}]}
    with pytest.raises(InvalidPlan, match="unpaired surrogates"):
        parse_plan(lone, tools=[])
    for number in ("NaN", "Infinity", "-Infinity"):  # Python's json reads them; JSON has none
        step = f'{{"name": "a", "kind": "tool", "tool": "echo", "args": {{"value": {number}}}}}'
        text = f'{{"steps": [{step}]}}'
        with pytest.raises(InvalidPlan, match=r"plan\.steps\.0\.args\.value: numbers must be fin"):
            parse_plan(text, tools=["echo"], check_args=argument_problems)
    big = {"value": "x" * 70_000}
    huge = {"steps": [{"name": "a", "kind": "tool", "tool": "echo", "args": big}]}
    with pytest.raises(InvalidPlan, match=r"steps\.0\.args: .*at most 64000 characters"):
        parse_plan(huge, tools=["echo"])


def test_a_new_step_never_takes_the_name_of_a_result() -> None:
    step = {"name": "a", "kind": "tool", "tool": "noop"}
    with pytest.raises(InvalidPlan, match="'a' is the name of a step that already succeeded"):
        parse_plan({"steps": [step]}, tools=["noop"], splice=Splice([done(1, "a")], {1: ()}))
    kept_b = Splice([done(1, "b")], {1: ()})
    assert parse_plan({"steps": [step]}, tools=["noop"], splice=kept_b).steps[0].name == "a"


def test_plan_text_may_hold_raw_newlines_in_strings_but_must_be_json() -> None:
    text = '{"steps": [{"name": "a", "kind": "model", "instruction": "one\ntwo"}]}'
    assert parse_plan(text, tools=[]).steps[0].instruction == "one\ntwo"
    with pytest.raises(InvalidPlan, match="invalid plan: not JSON: Expecting"):
        parse_plan('{"steps": [', tools=[])


def test_a_model_step_needs_an_instruction_and_names_each_tool_once() -> None:
    with pytest.raises(InvalidPlan, match="kind 'model' needs an 'instruction'"):
        parse_plan({"steps": [{"name": "a", "kind": "model", "instruction": "  "}]}, tools=[])
    twice = {"name": "a", "kind": "model", "instruction": "x", "tools": ["echo", "echo"]}
    with pytest.raises(InvalidPlan, match="'tools' names a tool twice"):
        parse_plan({"steps": [twice]}, tools=["echo"])
