"""Model providers: how a plan, replan, step or synthesis prompt becomes a completion.

`OpenAIProvider` talks to any OpenAI-compatible `/v1/chat/completions` endpoint with the official
SDK. `OfflineProvider` needs no network: it answers from the structured `payload` the prompt was
built from (never from the prompt text), deterministically, so the whole engine runs and is tested
without a model. Every completion it makes says `offline=True` so no one mistakes it for a model.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import openai
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from models.errors import ProviderError
from worker.tools.registry import find_playbook

Purpose = Literal["plan", "replan", "step", "synthesize"]
PROVIDER_NAMES = ("offline", "openai")
OFFLINE_PREFIX = "[offline] "
SYNTHESIS_LINE_MAX_CHARS = 200
# OpenAI's rule of thumb for English text (about 4 characters a token); tiktoken comes later.
CHARS_PER_TOKEN_ESTIMATE = 4


@dataclass(frozen=True)
class ModelRequest:
    """One model call.

    `messages` are OpenAI chat messages (`{"role", "content"}`); `payload` is the structured data
    they were rendered from (its shape depends on `purpose`, see `OfflineProvider`). When
    `json_schema` is set the answer must be JSON of that schema.
    """

    purpose: Purpose
    messages: list[dict[str, str]]
    payload: dict[str, Any]
    json_schema: dict[str, Any] | None = None
    max_output_tokens: int = 1024


@dataclass(frozen=True)
class Completion:
    """A model's answer and its token usage; `offline` marks the offline provider's answers."""

    text: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    offline: bool


class ChatProvider(Protocol):
    """Anything that turns a `ModelRequest` into a `Completion`, raising `ProviderError`."""

    name: str

    def complete(self, request: ModelRequest) -> Completion: ...


class OfflineProvider:
    """A deterministic stand-in for a model, reading `request.purpose` and `request.payload`.

    - plan `{"goal", "facts", "tools"}`: `{"steps": <playbook>}` if one matches the goal, else one
      model step `answer` whose instruction is the goal;
    - replan `{"goal", "facts", "tools", "failed_step": {"name", "tool", "args", "error",
      "instruction"}, "plan"}`: the failed tool's fallback (from the `tools` catalog) as one step
      with the failed step's name, else the failed step once more (the engine bounds replans);
    - step `{"instruction", "facts", "results"}`: `"[offline] <instruction>"`;
    - synthesize `{"goal", "facts", "results": [{"name", "status", "result"}]}`: `"[offline] "` and
      one line `name: <compact JSON, at most 200 chars>` per succeeded step.

    Token counts are estimates: ceil(chars / 4) per message and for the answer. Playbooks exist
    once their tool modules are loaded (`load_tool_modules`); until then every plan is `answer`.
    """

    name = "offline"

    def complete(self, request: ModelRequest) -> Completion:
        """Answer `request`; raises `ProviderError` if its payload lacks what the purpose needs."""
        try:
            text = _OFFLINE_ANSWERS[request.purpose](request.payload)
        except (KeyError, TypeError) as exc:
            raise ProviderError(f"offline {request.purpose}: malformed payload ({exc!r})") from exc
        return Completion(
            text=text,
            model="offline",
            prompt_tokens=_estimate_messages(request),
            completion_tokens=_estimate_tokens(text),
            finish_reason="stop",
            offline=True,
        )


class OpenAIProvider:
    """An OpenAI-compatible chat completions endpoint, through the official `openai` SDK.

    The SDK retries connection errors, 408/409/429 and 5xx `max_retries` times itself; what is
    left is raised as `ProviderError`. If the server reports no usage the token counts are the
    same estimate the offline provider uses.
    """

    name = "openai"

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None,
        api_key: str | None,
        request_timeout_s: float,
        max_retries: int,
    ) -> None:
        """Build the client; raises `ProviderError` if no API key is given or in OPENAI_API_KEY."""
        self.model = model
        try:
            self._client = openai.OpenAI(
                base_url=base_url,
                api_key=api_key,
                timeout=request_timeout_s,
                max_retries=max_retries,
            )
        except openai.OpenAIError as exc:
            raise ProviderError(f"openai provider: {exc}") from exc

    def complete(self, request: ModelRequest) -> Completion:
        """Send `request.messages`; raises `ProviderError` on any SDK error or an empty answer."""
        try:
            response = self._client.chat.completions.create(
                model=self.model,
                messages=cast("list[ChatCompletionMessageParam]", request.messages),
                max_completion_tokens=request.max_output_tokens,
                response_format=_response_format(request),
            )
        except openai.OpenAIError as exc:
            where = f"{self.model} at {self._client.base_url}"
            raise ProviderError(f"openai {request.purpose} call to {where}: {exc}") from exc
        return self._completion(request, response)

    def _completion(self, request: ModelRequest, response: ChatCompletion) -> Completion:
        if not response.choices or response.choices[0].message.content is None:
            refusal = response.choices[0].message.refusal if response.choices else None
            raise ProviderError(f"openai {self.model} returned no text (refusal: {refusal!r})")
        choice = response.choices[0]
        text = choice.message.content or ""
        usage = response.usage
        return Completion(
            text=text,
            model=response.model or self.model,
            prompt_tokens=usage.prompt_tokens if usage else _estimate_messages(request),
            completion_tokens=usage.completion_tokens if usage else _estimate_tokens(text),
            finish_reason=choice.finish_reason or "unknown",
            offline=False,
        )


def make_provider(
    name: str,
    *,
    model: str,
    base_url: str | None,
    api_key: str | None,
    request_timeout_s: float,
    max_retries: int,
) -> ChatProvider:
    """The provider called `name` ("offline" or "openai"); unknown names raise `ProviderError`.

    The offline provider ignores every other argument.
    """
    if name == "offline":
        return OfflineProvider()
    if name == "openai":
        return OpenAIProvider(
            model=model,
            base_url=base_url,
            api_key=api_key,
            request_timeout_s=request_timeout_s,
            max_retries=max_retries,
        )
    raise ProviderError(f"unknown model provider {name!r}; allowed: {', '.join(PROVIDER_NAMES)}")


def _response_format(request: ModelRequest) -> Any:
    """Structured outputs (OpenAI `json_schema` response format) when a schema is asked for."""
    if request.json_schema is None:
        return openai.omit
    return {
        "type": "json_schema",
        "json_schema": {"name": request.purpose, "schema": request.json_schema},
    }


def _estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN_ESTIMATE)


def _estimate_messages(request: ModelRequest) -> int:
    return sum(_estimate_tokens(message["content"]) for message in request.messages)


def _offline_plan(payload: Mapping[str, Any]) -> str:
    goal: str = payload["goal"]
    steps = find_playbook(goal)
    if steps is None:
        steps = [{"name": "answer", "instruction": goal, "kind": "model", "tool": None, "args": {}}]
    return json.dumps({"steps": steps})


def _offline_replan(payload: Mapping[str, Any]) -> str:
    failed: Mapping[str, Any] = payload["failed_step"]
    tool_name = failed.get("tool")
    fallbacks = {entry["name"]: entry.get("fallback") for entry in payload.get("tools", [])}
    fallback = fallbacks.get(tool_name) if tool_name else None
    if fallback is not None:
        step = {
            "name": failed["name"],
            "instruction": f"Use {fallback['tool']} instead of {tool_name}",
            "kind": "tool",
            "tool": fallback["tool"],
            "args": fallback["args"],
        }
    else:
        step = {
            "name": failed["name"],
            "instruction": failed.get("instruction", ""),
            "kind": "tool" if tool_name else "model",
            "tool": tool_name,
            "args": failed.get("args", {}),
        }
    return json.dumps({"steps": [step]})


def _offline_step(payload: Mapping[str, Any]) -> str:
    return OFFLINE_PREFIX + str(payload["instruction"])


def _offline_synthesize(payload: Mapping[str, Any]) -> str:
    lines = [
        f"{entry['name']}: {_compact(entry.get('result'))}"
        for entry in payload["results"]
        if entry.get("status") == "succeeded"
    ]
    return OFFLINE_PREFIX + ("\n".join(lines) if lines else "no step succeeded")


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if len(text) <= SYNTHESIS_LINE_MAX_CHARS:
        return text
    return text[: SYNTHESIS_LINE_MAX_CHARS - 3] + "..."


_OFFLINE_ANSWERS = {
    "plan": _offline_plan,
    "replan": _offline_replan,
    "step": _offline_step,
    "synthesize": _offline_synthesize,
}
