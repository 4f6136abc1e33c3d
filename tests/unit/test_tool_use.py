"""Tool calls inside a model step: each call is checked before its tool runs (no database here;
the bounded loop against the engine is in tests/integration/test_model_faults.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from models.errors import InvalidPlan, RetryableToolError
from models.plans.plans import parse_plan
from models.plans.tools import DEFAULT_TOOL_MODULES, ToolContext, get_tool, load_tool_modules, tool
from ops.fake_provider import FakeOpenAI, ok, tool_calls
from worker.execution.tool_use import answer_call, assistant_message
from worker.model_calls.prompts import function_tool, step_prompt
from worker.model_calls.providers import Completion, ModelRequest, OpenAIProvider, ToolCall

load_tool_modules([*DEFAULT_TOOL_MODULES, "tests.support.tools"])  # + append_marker


@tool("test_transient", description="Fail with a retryable error.")
def _transient(ctx: ToolContext) -> dict[str, Any]:
    raise RetryableToolError("upstream 503")


def ctx() -> ToolContext:
    return ToolContext(
        run_id=1, step_id=2, step_name="s", attempt=1, tries_of_name=1, facts={}, call_number=1
    )


def tools(*names: str) -> dict[str, Any]:
    return {name: get_tool(name) for name in names}


def marker_call(arguments: str) -> ToolCall:
    return ToolCall(id="call_1", name="append_marker", arguments=arguments)


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"path": "x", "marker": "a"', "not valid JSON"),
        ("[1, 2]", "must be a JSON object, not list"),
        ('"path=x"', "must be a JSON object, not str"),
        ('{"path": "PATH", "marker": 5}', "marker: Input should be a valid string"),
        ('{"path": "PATH", "marker": "a", "force": true}', "force: Extra inputs"),
        ("{}", "path: required but missing"),
    ],
)
def test_invalid_arguments_are_refused_and_the_tool_never_runs(
    tmp_path: Path, arguments: str, why: str
) -> None:
    target = tmp_path / "markers.txt"
    call = marker_call(arguments.replace("PATH", str(target)))
    answered = answer_call(ctx(), tools("append_marker"), call)
    assert answered.invalid is not None and why in answered.invalid
    assert answered.content.startswith("invalid call, the tool did not run")
    assert answered.result is None and answered.arguments is None
    assert not target.exists()


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_numbers_in_arguments_are_refused_and_the_tool_never_runs(
    tmp_path: Path, number: str
) -> None:
    """Issue 11: `json.loads` reads these, JSON has none; the tool must not run on them."""
    target = tmp_path / "markers.txt"
    echo = ToolCall(id="c", name="echo", arguments=f'{{"value": {{"x": [1, {number}]}}}}')
    answered = answer_call(ctx(), tools("echo"), echo)
    assert answered.invalid is not None
    assert "value.x.1: numbers must be finite" in answered.invalid
    assert answered.content.startswith("invalid call, the tool did not run")
    assert answered.result is None and answered.arguments is None
    arguments = f'{{"path": "{target}", "marker": "a", "force": {number}}}'
    marker = answer_call(ctx(), tools("append_marker"), marker_call(arguments))
    assert marker.invalid is not None and "force: numbers must be finite" in marker.invalid
    assert not target.exists()


def test_a_tool_not_offered_to_the_step_is_refused(tmp_path: Path) -> None:
    call = ToolCall(id="c", name="append_marker", arguments="{}")
    answered = answer_call(ctx(), tools("noop", "echo"), call)
    assert answered.invalid == (
        "tool 'append_marker' is not offered to this step; offered: echo, noop"
    )


def test_a_valid_call_runs_its_tool_once(tmp_path: Path) -> None:
    target = tmp_path / "markers.txt"
    arguments = json.dumps({"path": str(target), "marker": "a"})
    answered = answer_call(ctx(), tools("append_marker"), marker_call(arguments))
    assert answered.invalid is None
    assert answered.result == {"lines": 1}
    assert json.loads(answered.content) == {"lines": 1}
    assert target.read_text() == "a\n"


def test_a_failing_tool_answers_the_model_with_its_error() -> None:
    call = ToolCall(id="c", name="always_fails", arguments='{"message": "no receipts"}')
    answered = answer_call(ctx(), tools("always_fails"), call)
    assert answered.invalid is None  # the call was valid; the tool failed
    assert (answered.error, answered.content) == ("no receipts", "error: no receipts")


def test_a_retryable_tool_error_fails_the_attempt() -> None:
    call = ToolCall(id="c", name="test_transient", arguments="")
    with pytest.raises(RetryableToolError):
        answer_call(ctx(), tools("test_transient"), call)


def test_each_tool_call_of_a_step_has_its_own_idempotency_key() -> None:
    first = ToolContext(1, 2, "s", 1, 1, {}, call_number=1)
    second = ToolContext(1, 2, "s", 1, 1, {}, call_number=2)
    assert first.idempotency_key == "run-1/step-2/call-1"
    assert second.idempotency_key == "run-1/step-2/call-2"
    assert ToolContext(1, 2, "s", 1, 1, {}).idempotency_key == "run-1/step-2"


def test_the_assistant_message_carries_the_raw_calls_back() -> None:
    completion = Completion(
        text="",
        model="m",
        prompt_tokens=1,
        completion_tokens=1,
        finish_reason="tool_calls",
        offline=False,
        tool_calls=(ToolCall("call_1", "echo", '{"value": '),),
    )
    message = assistant_message(completion)
    assert message["content"] is None
    function = {"name": "echo", "arguments": '{"value": '}
    assert message["tool_calls"] == [{"id": "call_1", "type": "function", "function": function}]


def test_a_model_step_offers_its_tools_as_function_tools() -> None:
    prompt = step_prompt("convert", {}, [get_tool("echo").describe()])
    (offered,) = prompt.tools
    assert offered == function_tool(get_tool("echo").describe())
    assert offered["function"]["name"] == "echo"
    assert offered["function"]["parameters"]["required"] == ["value"]
    assert step_prompt("convert", {}).tools == ()


def test_plans_name_only_registered_tools_and_only_on_model_steps() -> None:
    known = ["echo", "noop"]
    step = {"name": "think", "kind": "model", "instruction": "x", "tools": ["echo"]}
    assert parse_plan({"steps": [step]}, tools=known).steps[0].tools == ["echo"]
    with pytest.raises(InvalidPlan, match=r"steps\.0\.tools: unknown tool 'fly'"):
        parse_plan({"steps": [{**step, "tools": ["fly"]}]}, tools=known)
    tool_step = {"name": "n", "kind": "tool", "tool": "noop", "tools": ["echo"]}
    with pytest.raises(InvalidPlan, match="'tools' is for kind 'model' steps only"):
        parse_plan({"steps": [tool_step]}, tools=known)


def test_the_openai_provider_sends_tools_and_reads_raw_tool_calls(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(tool_calls(("echo", '{"value": 1'), ("noop", "{}")), ok("done"))
    provider = OpenAIProvider(
        model="gpt-4o-mini", base_url=fake_openai.url, api_key="test", request_timeout_s=5
    )
    offered = (function_tool(get_tool("echo").describe()),)
    request = ModelRequest(
        purpose="step", messages=[{"role": "user", "content": "go"}], payload={}, tools=offered
    )
    completion = provider.complete(request)
    assert completion.text == "" and completion.finish_reason == "tool_calls"
    assert [(c.name, c.arguments) for c in completion.tool_calls] == [
        ("echo", '{"value": 1'),
        ("noop", "{}"),
    ]
    (sent,) = fake_openai.received()
    assert sent.body["tools"] == list(offered)
    assert provider.complete(request).tool_calls == ()


def test_the_plan_schema_spells_out_both_step_shapes_and_the_tool_names() -> None:
    from worker.model_calls.prompts import plan_schema

    steps = plan_schema(["echo", "noop"])["properties"]["steps"]
    tool_step, model_step = steps["items"]["anyOf"]
    assert tool_step["properties"]["kind"]["const"] == "tool"
    assert tool_step["properties"]["tool"]["enum"] == ["echo", "noop"]
    assert set(tool_step["required"]) == {"name", "kind", "tool", "args"}
    assert model_step["properties"]["kind"]["const"] == "model"
    assert model_step["properties"]["tools"]["items"]["enum"] == ["echo", "noop"]
    assert "instruction" in model_step["required"]
    # with no tools registered, only model steps can be written
    (only,) = plan_schema([])["properties"]["steps"]["items"]["anyOf"]
    assert only["properties"]["kind"]["const"] == "model"
