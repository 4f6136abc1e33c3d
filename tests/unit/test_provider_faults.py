"""The OpenAI provider against a misbehaving server: every failure is classified, none is retried
or waited out by the SDK, and every request has its timeout."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import openai
import pytest

from models.errors import (
    ContextTooLong,
    ProviderError,
    ProviderUnavailable,
    QuotaExhausted,
    RateLimited,
)
from ops.fake_provider import (
    COMPLETION_TOKENS,
    CONTEXT_TOO_LONG,
    PROMPT_TOKENS,
    FakeOpenAI,
    Reply,
    context_too_long,
    never_answers,
    ok,
    quota_exhausted,
    rate_limited,
    server_error,
    truncated_json,
    whitespace_until_length,
    wrong_shape_plan,
)
from worker.model_calls.providers import (
    DEFAULT_RETRY_AFTER_S,
    ModelRequest,
    OpenAIProvider,
    retry_after_s,
)

SCHEMA = {"type": "object", "properties": {"steps": {"type": "array"}}, "required": ["steps"]}


def request(*, schema: dict[str, Any] | None = None, max_output_tokens: int = 300) -> ModelRequest:
    return ModelRequest(
        purpose="plan" if schema else "step",
        messages=[{"role": "user", "content": "plan it"}],
        payload={},
        json_schema=schema,
        max_output_tokens=max_output_tokens,
    )


@pytest.fixture
def make_openai(fake_openai: FakeOpenAI) -> Callable[..., OpenAIProvider]:
    def make(timeout_s: float = 5.0) -> OpenAIProvider:
        return OpenAIProvider(
            model="gpt-4o-mini",
            base_url=fake_openai.url,
            api_key="test",
            request_timeout_s=timeout_s,
        )

    return make


def test_rate_limit_is_raised_at_once_with_its_retry_after(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(rate_limited("90"), ok("never reached"))
    started = time.monotonic()
    with pytest.raises(RateLimited) as caught:
        make_openai().complete(request())
    assert time.monotonic() - started < 2.0  # the SDK did not sleep out the 90 s itself
    assert caught.value.retry_after_s == 90.0
    assert "rate_limit_exceeded" in str(caught.value)
    assert [r.reply for r in fake_openai.requests] == ["rate_limited"]  # and did not retry


def test_retry_after_ms_is_read(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(rate_limited("1500", header="retry-after-ms"))
    with pytest.raises(RateLimited) as caught:
        make_openai().complete(request())
    assert caught.value.retry_after_s == 1.5


def test_quota_is_not_a_rate_limit(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(quota_exhausted())
    with pytest.raises(QuotaExhausted, match="insufficient_quota") as caught:
        make_openai().complete(request())
    assert not isinstance(caught.value, RateLimited)
    assert caught.value.reason == "quota_exhausted"
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("status", [500, 502, 503, 408, 409])
def test_server_errors_are_transient(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider], status: int
) -> None:
    fake_openai.script(server_error(status), ok("fine"))
    with pytest.raises(ProviderUnavailable, match=f"Error code: {status}"):
        make_openai().complete(request())
    assert (
        len(fake_openai.requests) == 1
    )  # agentq retries (worker.model_calls.calls), never the SDK
    assert make_openai().complete(request()).text == "fine"


@pytest.mark.parametrize("status", [400, 401, 404])
def test_client_errors_are_not_transient(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider], status: int
) -> None:
    fake_openai.script(server_error(status))
    with pytest.raises(ProviderError) as caught:
        make_openai().complete(request())
    assert type(caught.value) is ProviderError


SIZED_REFUSALS = sorted(set(CONTEXT_TOO_LONG) - {"unsized"})


@pytest.mark.parametrize("server", SIZED_REFUSALS)
def test_each_servers_context_too_long_is_recognised_with_its_sizes(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider], server: str
) -> None:
    fake_openai.script(context_too_long(server, context_tokens=8192, prompt_tokens=9000))
    with pytest.raises(ContextTooLong) as caught:
        make_openai().complete(request())
    refused = caught.value
    assert (refused.context_tokens, refused.prompt_tokens) == (8192, 9000)
    assert "8192" in refused.server_message and "Error code" not in refused.server_message
    assert "Error code: 400" in str(refused)  # the SDK's message, with the call it was
    assert len(fake_openai.requests) == 1  # never retried by the SDK


def test_a_context_too_long_that_names_no_sizes_is_recognised_by_its_code(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(context_too_long("unsized"))
    with pytest.raises(ContextTooLong) as caught:
        make_openai().complete(request())
    assert (caught.value.context_tokens, caught.value.prompt_tokens) == (None, None)
    assert caught.value.server_message == "The prompt is too long."


@pytest.mark.parametrize(
    "error",
    [
        {"message": "'messages' is too short; give the model context", "code": "invalid_value"},
        {"message": "Invalid 'max_tokens': maximum is 4096.", "type": "invalid_request_error"},
        {"message": "model 'gpt-9' not found", "code": 400, "type": "not_found_error"},
    ],
)
def test_an_unrelated_400_stays_a_provider_error(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider], error: dict[str, Any]
) -> None:
    fake_openai.script(Reply("bad_request", status=400, body={"error": error}))
    with pytest.raises(ProviderError) as caught:
        make_openai().complete(request())
    assert type(caught.value) is ProviderError


def test_a_request_that_never_answers_times_out(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(never_answers(10))
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable, match="timed out"):
        make_openai(timeout_s=0.5).complete(request())
    assert 0.5 <= time.monotonic() - started < 2.0
    assert len(fake_openai.requests) == 1


def test_connection_refused_is_transient() -> None:
    with FakeOpenAI() as gone:
        url = gone.url
    provider = OpenAIProvider(
        model="gpt-4o-mini", base_url=url, api_key="test", request_timeout_s=1.0
    )
    with pytest.raises(ProviderUnavailable, match="Connection error"):
        provider.complete(request())


def test_hostile_answers_come_back_as_they_are(
    fake_openai: FakeOpenAI, make_openai: Callable[..., OpenAIProvider]
) -> None:
    fake_openai.script(whitespace_until_length(), truncated_json(), wrong_shape_plan())
    provider = make_openai()
    cut = provider.complete(request(schema=SCHEMA, max_output_tokens=321))
    assert (cut.text.strip(), cut.finish_reason, cut.completion_tokens) == ("", "length", 321)
    truncated = provider.complete(request(schema=SCHEMA))
    with pytest.raises(json.JSONDecodeError):
        json.loads(truncated.text)
    shaped = provider.complete(request(schema=SCHEMA))
    assert isinstance(json.loads(shaped.text)["steps"], dict)
    assert [r.purpose for r in fake_openai.requests] == ["plan", "plan", "plan"]


def test_scripts_answer_only_their_marker(fake_openai: FakeOpenAI) -> None:
    fake_openai.script(server_error(), when="MARK")
    provider = OpenAIProvider(
        model="gpt-4o-mini", base_url=fake_openai.url, api_key="test", request_timeout_s=5
    )
    plain = provider.complete(request(schema=SCHEMA))
    assert json.loads(plain.text)["steps"][0]["kind"] == "model"  # the default plan
    assert (plain.prompt_tokens, plain.completion_tokens) == (PROMPT_TOKENS, COMPLETION_TOKENS)
    marked = ModelRequest("step", [{"role": "user", "content": "MARK this"}], {})
    with pytest.raises(ProviderUnavailable):
        provider.complete(marked)
    assert provider.complete(marked).text == "fake answer"  # the script is used up
    assert [r.reply for r in fake_openai.received("MARK")] == ["server_error", "ok"]
    times = [r.at for r in fake_openai.requests]
    assert times == sorted(times)


def test_embeddings_endpoint(fake_openai: FakeOpenAI) -> None:
    client = openai.OpenAI(base_url=fake_openai.url, api_key="test", max_retries=0)
    data = client.embeddings.create(model="e", input=["a", "b"], dimensions=8).data
    assert [len(d.embedding) for d in data] == [8, 8]
    assert abs(sum(x * x for x in data[0].embedding) - 1.0) < 1e-9
    assert data[0].embedding != data[1].embedding
    assert len(fake_openai.received(path="/v1/embeddings")) == 1


def test_retry_after_header_forms() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    later = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert retry_after_s({"retry-after": later}, now=now) == 42.0
    assert retry_after_s({"retry-after": "7"}) == 7.0
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert retry_after_s({"retry-after": "-3"}) == 0.0
    assert retry_after_s({"retry-after": "soon"}) == DEFAULT_RETRY_AFTER_S
    assert retry_after_s({"retry-after": "nan"}) == DEFAULT_RETRY_AFTER_S
    assert retry_after_s({}) == DEFAULT_RETRY_AFTER_S
