"""Model providers: offline answers, and the OpenAI provider against a local HTTP server."""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai
import pytest

from models.engine.runs import GOAL_MAX_CHARS
from models.errors import ProviderError
from models.plans.expectations import loaded
from models.plans.plans import MAX_INSTRUCTION_CHARS, parse_plan
from models.plans.references import references
from models.plans.tools import DEFAULT_TOOL_MODULES, catalog, get_tool, load_tool_modules
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.provider_choice import make_provider
from worker.model_calls.providers import (
    ChatProvider,
    ModelRequest,
    OpenAIProvider,
    Purpose,
    StructuredOutput,
    _response_format,
)
from worker.tools.expenses import EXPENSE_PLAYBOOK

load_tool_modules(DEFAULT_TOOL_MODULES)

FACTS = {"currency": "EUR", "cost_centre": "CC-4410", "trip": "lisbon-2026-10"}
STEP_KEYS = {"name", "instruction", "kind", "tool", "args"}
PLAN_SCHEMA = {"type": "object", "properties": {"steps": {"type": "array"}}, "required": ["steps"]}


def request(purpose: Purpose, payload: dict[str, Any], **extra: Any) -> ModelRequest:
    messages = [{"role": "system", "content": "You plan."}, {"role": "user", "content": "x" * 9}]
    return ModelRequest(purpose=purpose, messages=messages, payload=payload, **extra)


def check_steps(text: str, *, earlier: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """Parse a plan answer and check each step's shape, tool and references (`after`, when a
    step names it, covers what it refers to: `parse_plan` checks the graph itself); its
    `expect`, when it has one, holds expectations."""
    steps: list[dict[str, Any]] = json.loads(text)["steps"]
    available = set(earlier)
    for step in steps:
        assert set(step) - {"after", "expect"} == STEP_KEYS
        loaded(step.get("expect", []))  # raises if it holds no expectations
        assert step["kind"] in ("tool", "model")
        assert (step["tool"] is None) == (step["kind"] == "model")
        if step["tool"] is not None:
            get_tool(step["tool"])
        assert references(step["args"]) <= available
        available.add(step["name"])
    return steps


# -- offline --------------------------------------------------------------------------------


def test_offline_plan_uses_the_playbook() -> None:
    payload = {"goal": "File my Lisbon trip expense report", "facts": FACTS, "tools": catalog()}
    completion = OfflineProvider().complete(request("plan", payload, json_schema=PLAN_SCHEMA))
    assert check_steps(completion.text) == EXPENSE_PLAYBOOK
    assert completion.offline is True
    assert (completion.model, completion.finish_reason) == ("offline", "stop")
    assert completion.prompt_tokens == math.ceil(len("You plan.") / 4) + math.ceil(9 / 4) == 6
    assert completion.completion_tokens == math.ceil(len(completion.text) / 4)


def test_offline_plan_without_playbook_is_one_model_step() -> None:
    goal = "Write a haiku about Lisbon"
    payload = {"goal": goal, "facts": FACTS, "tools": catalog()}
    steps = check_steps(OfflineProvider().complete(request("plan", payload)).text)
    assert steps == [
        {"name": "answer", "instruction": goal, "kind": "model", "tool": None, "args": {}}
    ]


def test_offline_plan_of_a_goal_longer_than_an_instruction_is_still_a_valid_plan() -> None:
    goal = "x" * (GOAL_MAX_CHARS // 2)  # a goal may be longer than a step's instruction
    payload = {"goal": goal, "facts": FACTS, "tools": catalog()}
    text = OfflineProvider().complete(request("plan", payload)).text
    plan = parse_plan(json.loads(text), tools=[t["name"] for t in catalog()])  # raises if invalid
    assert plan.steps[0].instruction == goal[:MAX_INSTRUCTION_CHARS]


def replan_payload(failed: dict[str, Any]) -> dict[str, Any]:
    return {
        "goal": "File my Lisbon trip expense report",
        "facts": FACTS,
        "tools": catalog(),
        "failed_step": failed,
        "plan": EXPENSE_PLAYBOOK,
    }


def test_offline_replan_swaps_in_the_fallback() -> None:
    failed = {**EXPENSE_PLAYBOOK[1], "error": "rate service timed out after 0.2 s"}
    failed.pop("kind")
    text = OfflineProvider().complete(request("replan", replan_payload(failed))).text
    assert check_steps(text, earlier=frozenset({"receipts"})) == [
        {
            "name": "rate",
            "instruction": "Use cached_rate instead of live_rate",
            "kind": "tool",
            "tool": "cached_rate",
            "args": {
                "base": "${steps.receipts.currency}",
                "quote": "${facts.currency}",
                "month": "${steps.receipts.month}",
            },
        }
    ]


@pytest.mark.parametrize(
    ("tool", "args", "kind"),
    [
        ("cached_rate", {"base": "USD", "quote": "EUR", "month": "2026-11"}, "tool"),
        (None, {}, "model"),
    ],
)
def test_offline_replan_without_fallback_retries_the_step(
    tool: str | None, args: dict[str, Any], kind: str
) -> None:
    failed = {
        "name": "rate",
        "tool": tool,
        "args": args,
        "error": "no table",
        "instruction": "Rate",
    }
    text = OfflineProvider().complete(request("replan", replan_payload(failed))).text
    expected = {"name": "rate", "instruction": "Rate", "kind": kind, "tool": tool, "args": args}
    assert check_steps(text) == [expected]


def test_offline_replan_keeps_the_failed_steps_expectations() -> None:
    """The step put in the failed one's place is held to what its result must hold, whether it
    is the failed tool again or its fallback; a step without any gets none."""
    expect = [{"key": "rate", "min": 0}]
    again = {"name": "rate", "tool": "cached_rate", "args": {}, "instruction": "Rate"}
    fallback = {**EXPENSE_PLAYBOOK[1], "error": "timed out"}
    for failed in (again, fallback):
        (step,) = json.loads(
            OfflineProvider().complete(request("replan", replan_payload(failed))).text
        )["steps"]
        assert step["tool"] == "cached_rate" and "expect" not in step  # none declared, none added
        failed = {**failed, "expect": expect, "error": "rate: expected a number >= 0"}
        text = OfflineProvider().complete(request("replan", replan_payload(failed))).text
        assert check_steps(text, earlier=frozenset({"receipts"}))[0]["expect"] == expect


def test_offline_step_and_synthesize_are_plain_text() -> None:
    step = request("step", {"instruction": "Say hello", "facts": FACTS, "results": {}})
    assert OfflineProvider().complete(step).text == "[offline] Say hello"
    results = [
        {"name": "rate", "status": "succeeded", "result": {"rate": 0.92}},
        {"name": "live", "status": "failed", "result": None},
        {"name": "big", "status": "succeeded", "result": {"blob": "y" * 500}},
    ]
    payload = {"goal": "g", "facts": FACTS, "results": results}
    lines = OfflineProvider().complete(request("synthesize", payload)).text.split("\n")
    assert lines[0] == '[offline] rate: {"rate":0.92}'
    assert len(lines) == 2
    assert lines[1].startswith('big: {"blob":"yyy')
    assert len(lines[1]) == len("big: ") + 200
    assert lines[1].endswith("...")


def test_offline_malformed_payload_is_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="offline replan: malformed payload"):
        OfflineProvider().complete(request("replan", {"goal": "g"}))


def test_make_provider() -> None:
    options: dict[str, Any] = {
        "model": "m",
        "base_url": None,
        "api_key": "k",
        "request_timeout_s": 1.0,
    }
    offline: ChatProvider = make_provider("offline", **options)
    assert isinstance(offline, OfflineProvider)
    assert offline.name == "offline"
    assert make_provider("openai", **options).name == "openai"
    with pytest.raises(
        ProviderError, match="unknown model provider 'anthropic'; allowed: offline, openai"
    ):
        make_provider("anthropic", **options)


def test_openai_without_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ProviderError, match="openai provider"):
        make_provider("openai", model="m", base_url=None, api_key=None, request_timeout_s=1.0)


# -- OpenAI against a local HTTP server -----------------------------------------------------


@dataclass
class FakeServer:
    """A `/v1/chat/completions` endpoint: records requests and answers with `reply`."""

    url: str
    requests: list[dict[str, Any]] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0
    reply: dict[str, Any] = field(default_factory=dict)


def canned_completion(content: str | None, *, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "test-model-2026",
        "choices": [
            {
                "index": 0,
                "finish_reason": "length",
                "message": {"role": "assistant", "content": content},
            }
        ],
    }
    if usage:
        body["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    return body


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    state = FakeServer(url="", reply=canned_completion('{"steps": []}'))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            auth = self.headers.get("Authorization")
            state.requests.append({"path": self.path, "authorization": auth, "body": body})
            time.sleep(state.delay_s)
            data = json.dumps(state.reply if state.status == 200 else {"error": {"message": "no"}})
            try:
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data.encode())
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client timed out and left

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    yield state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def make_openai(server: FakeServer) -> Callable[..., OpenAIProvider]:
    def make(**overrides: Any) -> OpenAIProvider:
        options: dict[str, Any] = {
            "model": "test-model",
            "base_url": server.url,
            "api_key": "test-key",
            "request_timeout_s": 5.0,
        }
        return OpenAIProvider(**{**options, **overrides})

    return make


def test_openai_sends_messages_and_schema(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    asked = request("plan", {"goal": "g"}, json_schema=PLAN_SCHEMA, max_output_tokens=300)
    completion = make_openai().complete(asked)
    assert completion.text == '{"steps": []}'
    assert (completion.model, completion.finish_reason) == ("test-model-2026", "length")
    assert (completion.prompt_tokens, completion.completion_tokens) == (11, 7)
    assert completion.offline is False
    [received] = server.requests
    assert received["path"] == "/v1/chat/completions"
    assert received["authorization"] == "Bearer test-key"
    body = received["body"]
    assert body["model"] == "test-model"
    assert body["messages"] == asked.messages
    assert body["max_completion_tokens"] == 300
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "plan", "schema": PLAN_SCHEMA},
    }


@pytest.mark.parametrize(
    ("structured_output", "expected"),
    [
        (
            "json_schema",
            {"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN_SCHEMA}},
        ),
        ("json_object", {"type": "json_object", "schema": PLAN_SCHEMA}),
        ("off", None),
    ],
)
def test_response_format_per_setting(
    structured_output: StructuredOutput, expected: dict[str, Any] | None
) -> None:
    asked = request("plan", {"goal": "g"}, json_schema=PLAN_SCHEMA)
    sent = _response_format(asked, structured_output)
    assert (None if sent is openai.omit else sent) == expected
    assert _response_format(request("step", {}), structured_output) is openai.omit  # no schema


def test_openai_sends_the_llama_cpp_response_format(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    asked = request("plan", {"goal": "g"}, json_schema=PLAN_SCHEMA, max_output_tokens=300)
    make_openai(structured_output="json_object", max_tokens_field="max_tokens").complete(asked)
    make_openai(structured_output="off").complete(asked)
    first, second = (r["body"] for r in server.requests)
    assert first["response_format"] == {"type": "json_object", "schema": PLAN_SCHEMA}
    assert first["max_tokens"] == 300 and "max_completion_tokens" not in first
    assert "response_format" not in second
    assert second["max_completion_tokens"] == 300 and "max_tokens" not in second


def test_the_llama_cpp_schema_leaves_out_the_bounds_its_converter_unrolls() -> None:
    bounded = {
        "type": "object",
        "properties": {
            "maxLength": {"type": "string", "maxLength": 4000, "minLength": 1},
            "steps": {"type": "array", "items": {"$ref": "#/$defs/S"}, "maxItems": 50},
        },
        "$defs": {"S": {"type": "string", "maxLength": 9, "pattern": "^[a-z]+$"}},
    }
    sent = _response_format(request("plan", {}, json_schema=bounded), "json_object")
    assert sent["schema"] == {
        "type": "object",
        "properties": {
            "maxLength": {"type": "string", "minLength": 1},  # a property may have that name
            "steps": {"type": "array", "items": {"$ref": "#/$defs/S"}},
        },
        "$defs": {"S": {"type": "string", "pattern": "^[a-z]+$"}},
    }


def test_openai_without_schema_or_usage(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    server.reply = canned_completion("hello there", usage=False)
    asked = request("step", {"instruction": "hi"})
    completion = make_openai().complete(asked)
    assert "response_format" not in server.requests[0]["body"]
    assert completion.text == "hello there"
    assert completion.prompt_tokens == 6  # estimated as offline does: ceil(9/4) + ceil(9/4)
    assert completion.completion_tokens == math.ceil(len("hello there") / 4)


def test_openai_server_error_is_a_provider_error(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    server.status = 500
    with pytest.raises(
        ProviderError, match=r"openai step call to test-model at http://127\.0\.0\.1:\d+/v1"
    ):
        make_openai().complete(request("step", {}))
    assert len(server.requests) == 1


def test_openai_timeout_is_a_provider_error(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    server.delay_s = 2.0
    started = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        make_openai(request_timeout_s=0.3).complete(request("step", {}))
    assert time.monotonic() - started < 1.5


def test_openai_empty_answer_is_a_provider_error(
    server: FakeServer, make_openai: Callable[..., OpenAIProvider]
) -> None:
    server.reply = canned_completion(None)
    with pytest.raises(ProviderError, match="returned no text"):
        make_openai().complete(request("step", {}))
