"""Model providers: how a plan, replan, step or synthesis prompt becomes a completion.

`OpenAIProvider` talks to any OpenAI-compatible `/v1/chat/completions` endpoint with the official
SDK. `OfflineProvider` needs no network: it answers from the structured `payload` the prompt was
built from (never from the prompt text), deterministically, so the whole engine runs and is tested
without a model. Every completion it makes says `offline=True` so no one mistakes it for a model.
`worker.model_calls.provider_choice.make_provider` picks one by its configured name.
"""

from __future__ import annotations

import email.utils
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, cast

import openai
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from models.errors import (
    ContextTooLong,
    ProviderError,
    ProviderUnavailable,
    QuotaExhausted,
    RateLimited,
)

Purpose = Literal[
    "plan",
    "replan",
    "step",
    "check_plan",
    "synthesize",
    "check_goal",
    "summarize",
    "extract_facts",
]
PROVIDER_NAMES = ("offline", "openai")
StructuredOutput = Literal["json_schema", "json_object", "off"]  # AGENTQ_STRUCTURED_OUTPUT
MaxTokensField = Literal["max_completion_tokens", "max_tokens"]  # AGENTQ_MAX_TOKENS_FIELD
MAX_OUTPUT_TOKENS = 1024  # an answer's token limit, unless AGENTQ_RESERVED_OUTPUT_TOKENS is less
# llama-cpp-python's schema-to-grammar converter unrolls these bounds into as many nested rules:
# PlanSpec's `instruction` (maxLength 4000) becomes a grammar llama.cpp fails to parse, and the
# server then crashes (0.3.36). The answer is still validated against the whole schema.
UNROLLED_BOUNDS = frozenset({"maxLength", "maxItems"})
SCHEMA_MAPS = frozenset({"properties", "$defs", "definitions", "patternProperties"})
# OpenAI's rule of thumb for English text (about 4 characters a token); tiktoken comes later.
CHARS_PER_TOKEN_ESTIMATE = 4
# A 429 that names no wait: OpenAI's limits are per minute (requests and tokens per minute,
# https://platform.openai.com/docs/guides/rate-limits), so a third of a window is a fair first wait.
DEFAULT_RETRY_AFTER_S = 20.0
QUOTA_CODE = "insufficient_quota"  # OpenAI's 429 for an account with no credit left
RETRYABLE_STATUSES = frozenset({408, 409})  # and every 5xx: the statuses the SDK itself retries
# A 400 that refuses a prompt longer than the server's context window, as each server says it:
# - OpenAI: `error.code` "context_length_exceeded", "This model's maximum context length is
#   128000 tokens. However, your messages resulted in 130001 tokens. ..."; llama-cpp-python's
#   server answers in the same form (llama_cpp/server/errors.py, `context_length_exceeded`:
#   "... However, you requested 9224 tokens (8200 in the messages, 1024 in the completion).").
# - llama.cpp's server: `error.type` "exceed_context_size_error", with `n_prompt_tokens` and
#   `n_ctx` beside "request (9000 tokens) exceeds the available context size (8192 tokens), try
#   increasing it" (tools/server/server-context.cpp, ERROR_TYPE_EXCEED_CONTEXT_SIZE; the fields
#   from server-task.cpp, `server_task_result_error::to_json`); older builds said "input (9000
#   tokens) is larger than the max context size (8192 tokens)".
# - vLLM: type "BadRequestError", code 400, "This model's maximum context length is 8192 tokens.
#   However, your request has 9000 input tokens. ..." (vllm/entrypoints/openai/serving_engine.py,
#   `_validate_input`), or "'max_tokens' ... is too large: 2000. This model's maximum context
#   length is 8192 tokens and your request has 7000 input tokens (...)"; later releases say "...
#   you requested 1024 output tokens and your prompt contains at least 8193 input tokens, ...",
#   and releases before 0.5 "... you requested 9224 tokens (8200 in the messages, ...)".
CONTEXT_TOO_LONG_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error"})
CONTEXT_TOO_LONG_WORDS = re.compile(
    r"maximum context length is|exceeds the available context size|larger than the max context",
    re.IGNORECASE,
)
WINDOW_PATTERNS = (r"maximum context length is (\d+)", r"context size \((\d+) tokens\)")
PROMPT_PATTERNS = (  # the prompt alone, never prompt and answer together ("you requested 9224")
    r"\((\d+) in the messages",
    r"resulted in (\d+) tokens",
    r"request has (\d+) input tokens",
    r"prompt contains (?:at least )?(\d+) input tokens",
    r"(?:request|input) \((\d+) tokens\)",
)


@dataclass(frozen=True)
class ModelRequest:
    """One model call.

    `messages` are OpenAI chat messages (`{"role", "content"}`, and for a tool-calling exchange the
    assistant's `tool_calls` and the `tool` answers); `payload` is the structured data they were
    rendered from (its shape depends on `purpose`, see `OfflineProvider`). When `json_schema` is
    set the answer must be JSON of that schema; when `tools` are given the model may call them.
    """

    purpose: Purpose
    messages: list[dict[str, Any]]
    payload: dict[str, Any]
    json_schema: dict[str, Any] | None = None
    max_output_tokens: int = MAX_OUTPUT_TOKENS
    estimated_prompt_tokens: int | None = None  # our tiktoken count, to compare with the usage
    tools: tuple[dict[str, Any], ...] = ()  # OpenAI function tools: {"type": "function", ...}


@dataclass(frozen=True)
class ToolCall:
    """A tool call as the model wrote it: `arguments` is its raw text, not yet parsed (it may not
    be JSON at all); `id` pairs the call with the `tool` message that answers it."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """A model's answer and its token usage; `offline` marks the offline provider's answers.

    `tool_calls` holds the tools the model asked to call instead of (or beside) answering;
    `usage_reported` is False when the server said no usage and the counts are estimates.
    """

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    offline: bool
    tool_calls: tuple[ToolCall, ...] = ()
    usage_reported: bool = True


class ChatProvider(Protocol):
    """Anything that turns a `ModelRequest` into a `Completion`, raising `ProviderError`."""

    name: str

    def complete(self, request: ModelRequest) -> Completion: ...


class OpenAIProvider:
    """An OpenAI-compatible chat completions endpoint, through the official `openai` SDK.

    Every request has the timeout `request_timeout_s`, and the SDK's own retries are off
    (`max_retries=0`): it would otherwise sleep out a 429's `retry-after` inside the worker.
    Failures are classified by `classify` and retried, or deferred, by `worker.model_calls.calls`.
    If the server reports no usage the token counts are the same estimate the offline provider uses.
    `structured_output` says how a JSON schema is asked for (`_response_format`), and
    `max_tokens_field` which request field carries `max_output_tokens`: OpenAI's current
    `max_completion_tokens`, or the older `max_tokens`, the only one llama-cpp-python reads.
    `temperature`, when given, is sent with every request (None: the server's default).
    """

    name = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        request_timeout_s: float,
        structured_output: StructuredOutput = "json_schema",
        max_tokens_field: MaxTokensField = "max_completion_tokens",
        temperature: float | None = None,
    ) -> None:
        """Build the client; raises `ProviderError` if no API key is given or in OPENAI_API_KEY."""
        self.model = model
        self.temperature = temperature
        self.structured_output: StructuredOutput = structured_output
        self.max_tokens_field: MaxTokensField = max_tokens_field
        try:
            self._client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=request_timeout_s,
                max_retries=0,
            )
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai provider: {exc}") from exc

    def complete(self, request: ModelRequest) -> Completion:
        """Send `request.messages`; raises what `classify` makes of an SDK error, and
        `ProviderError` for an empty answer."""
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", request.messages),
                max_completion_tokens=self._cap(request, "max_completion_tokens"),
                max_tokens=self._cap(request, "max_tokens"),
                response_format=_response_format(request, self.structured_output),
                tools=cast("list[ChatCompletionToolParam]", list(request.tools)) or openai.omit,
                temperature=openai.omit if self.temperature is None else self.temperature,
            )
        except openai.OpenAIError as exc:
            where = f"openai {request.purpose} call to {self.model} at {self._client.base_url}"
            raise classify(exc, where) from exc
        return self._completion(request, response)

    def _cap(self, request: ModelRequest, field: MaxTokensField) -> int | openai.Omit:
        return request.max_output_tokens if field == self.max_tokens_field else openai.omit

    def _completion(self, request: ModelRequest, response: ChatCompletion) -> Completion:
        message = response.choices[0].message if response.choices else None
        calls = tuple(
            ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)
            for call in (message.tool_calls or [] if message else [])
            if call.type == "function"
        )
        if message is None or (message.content is None and not calls):
            refusal = message.refusal if message else None
            raise ProviderError(f"openai {self.model} returned no text (refusal: {refusal!r})")
        text = message.content or ""
        usage = response.usage
        return Completion(
            text=text,
            model=response.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else estimate_messages(request),
            completion_tokens=usage.completion_tokens if usage else estimate_tokens(text),
            finish_reason=response.choices[0].finish_reason or "unknown",
            offline=False,
            tool_calls=calls,
            usage_reported=usage is not None,
        )


def classify(exc: openai.OpenAIError, where: str) -> ProviderError:
    """What an SDK error means for agentq; `where` starts the message.

    - 429 with code or type `insufficient_quota`: `QuotaExhausted` (never retried);
    - any other 429: `RateLimited`, waiting what `retry_after_s` reads from the response;
    - a timeout, a connection error, 408, 409 or 5xx: `ProviderUnavailable` (retried);
    - a 400 refusing the prompt as longer than the context window: `ContextTooLong` (see
      `context_too_long`);
    - anything else (400, 401, 404, a malformed response): `ProviderError`.
    """
    code = getattr(exc, "code", None)
    message = f"{where}: {exc}" + (f" [{code}]" if code else "")
    if isinstance(exc, openai.RateLimitError):
        if QUOTA_CODE in (exc.code, exc.type):
            return QuotaExhausted(message)
        return RateLimited(message, retry_after_s=retry_after_s(exc.response.headers))
    if isinstance(exc, openai.APIConnectionError):  # APITimeoutError is one
        return ProviderUnavailable(message)
    if isinstance(exc, openai.APIStatusError) and (
        exc.status_code >= 500 or exc.status_code in RETRYABLE_STATUSES
    ):
        return ProviderUnavailable(message)
    if isinstance(exc, openai.BadRequestError):
        return context_too_long(exc, message) or ProviderError(message)
    return ProviderError(message)


def context_too_long(exc: openai.BadRequestError, message: str) -> ContextTooLong | None:
    """`ContextTooLong` (with `message`) when the 400 `exc` refuses a prompt longer than the
    server's context window, in any of the servers' forms (`CONTEXT_TOO_LONG_CODES`,
    `CONTEXT_TOO_LONG_WORDS`), with the window and the prompt's tokens when it says them
    (llama.cpp's `n_ctx` and `n_prompt_tokens`, else read from its words); else None."""
    body = exc.body if isinstance(exc.body, dict) else {}
    said = str(body.get("message") or exc.message)
    codes = {str(exc.code), str(exc.type)}
    if not codes & CONTEXT_TOO_LONG_CODES and not CONTEXT_TOO_LONG_WORDS.search(said):
        return None
    return ContextTooLong(
        message,
        server_message=said,
        context_tokens=_count(body.get("n_ctx")) or _first_number(WINDOW_PATTERNS, said),
        prompt_tokens=_count(body.get("n_prompt_tokens")) or _first_number(PROMPT_PATTERNS, said),
    )


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _first_number(patterns: tuple[str, ...], text: str) -> int | None:
    for pattern in patterns:
        if found := re.search(pattern, text, re.IGNORECASE):
            return _count(int(found.group(1)))
    return None


def retry_after_s(headers: Mapping[str, str], *, now: datetime | None = None) -> float:
    """Seconds a 429 asks to wait: `retry-after-ms`, else `retry-after` (seconds or an HTTP
    date, RFC 9110 section 10.2.3), else `DEFAULT_RETRY_AFTER_S`; never negative."""
    waits = (
        _number(headers.get("retry-after-ms"), scale=0.001),
        _number(headers.get("retry-after"), scale=1.0),
        _seconds_until(headers.get("retry-after"), now or datetime.now(UTC)),
    )
    return next((max(w, 0.0) for w in waits if w is not None), DEFAULT_RETRY_AFTER_S)


def _number(value: str | None, *, scale: float) -> float | None:
    try:
        seconds = float(value) * scale if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and math.isfinite(seconds) else None


def _seconds_until(http_date: str | None, now: datetime) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(http_date or "")
    except (TypeError, ValueError):
        return None
    return (when - now).total_seconds() if when.tzinfo else None


def _response_format(request: ModelRequest, structured_output: StructuredOutput) -> Any:
    """The `response_format` of a request whose answer must be JSON of `request.json_schema`.

    - `json_schema`: OpenAI's structured outputs (also vLLM's and Ollama's form);
    - `json_object`: `{"type": "json_object", "schema": ...}`, which llama-cpp-python's server
      compiles into a grammar (`llama_cpp.llama_chat_format._grammar_for_response_format`; it
      refuses `json_schema`), less the bounds its converter unrolls (`UNROLLED_BOUNDS`);
    - `off`: nothing; the answer is validated (and re-asked) all the same.
    """
    if request.json_schema is None or structured_output == "off":
        return openai.omit
    if structured_output == "json_object":
        return {"type": "json_object", "schema": _without_unrolled_bounds(request.json_schema)}
    return {
        "type": "json_schema",
        "json_schema": {"name": request.purpose, "schema": request.json_schema},
    }


def _without_unrolled_bounds(schema: Any, *, in_map: bool = False) -> Any:
    """`schema` less every `UNROLLED_BOUNDS` keyword (a property of that name stays)."""
    if isinstance(schema, list):
        return [_without_unrolled_bounds(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    return {
        key: _without_unrolled_bounds(value, in_map=key in SCHEMA_MAPS and not in_map)
        for key, value in schema.items()
        if in_map or key not in UNROLLED_BOUNDS
    }


def estimate_tokens(text: str) -> int:
    """Tokens of `text` estimated at 4 characters each, for servers that report no usage."""
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


def estimate_messages(request: ModelRequest) -> int:
    """The estimate of `estimate_tokens` over every message of `request` (its content, and the
    JSON of any tool calls it holds)."""
    return sum(
        estimate_tokens(message.get("content") or "")
        + (estimate_tokens(json.dumps(message["tool_calls"])) if "tool_calls" in message else 0)
        for message in request.messages
    )
