"""Settings for the chat model agentq calls: which provider and model, how it is asked for
JSON, and how its prompts are counted (`worker.model_calls`).

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. They live here only to keep
`models/settings.py` under 400 lines; the model's price and the timeout ladder's check are
`Settings`' own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings

from models.settings_connections import blank_is_unset


class ProviderSettings(BaseSettings):
    """Fields of `Settings` for the chat model provider."""

    provider: Literal["offline", "openai"] = Field(
        default="offline",
        description="`offline` (deterministic, no network) or `openai` (any OpenAI-compatible "
        "server).",
    )
    model: str = Field(default="gpt-4o-mini", description="Chat model name.")
    openai_base_url: str | None = Field(
        default=None,
        description="Base URL of an OpenAI-compatible server (vLLM, Ollama, llama.cpp); unset: "
        "OpenAI's.",
    )
    openai_api_key: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENTQ_OPENAI_API_KEY", "OPENAI_API_KEY"),
        description="API key for the `openai` provider.",
    )
    # llama-cpp-python's server answers `json_schema` with an HTTP 500, and ignores OpenAI's
    # `max_completion_tokens`, reading only the older `max_tokens`.
    structured_output: Literal["json_schema", "json_object", "off"] = Field(
        default="json_schema",
        description="How the `openai` provider asks for JSON of a schema (plans, replans, fact "
        "extraction): `json_schema` (OpenAI's structured outputs), `json_object` "
        '(llama-cpp-python\'s server: `{"type": "json_object", "schema": ...}`, compiled into a '
        "grammar), or `off` (the answer is only validated and re-asked).",
    )
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = Field(
        default="max_completion_tokens",
        description="Request field that carries the answer's token limit: OpenAI's "
        "`max_completion_tokens`, or `max_tokens` for servers that read only that one "
        "(llama-cpp-python's).",
    )
    model_temperature: float | None = Field(
        default=None,
        ge=0,
        le=2,
        description="Sampling temperature sent with every model call; unset sends none (the "
        "server's default: llama.cpp's is 0.8). `agentq demo --model` sets 0.",
    )
    tokenizer: Literal["tiktoken", "server", "auto"] = Field(
        default="tiktoken",
        description="Whose count checks a prompt before it is sent: `tiktoken` (ours, calibrated "
        "per model by the prompt tokens servers report), `server` (also the model server's own, "
        "once per call; a request it finds too long for the window is rebuilt smaller, unsent), "
        "or `auto` (`server` until the server first answers neither tokenize endpoint, then "
        "`tiktoken`).",
    )

    # The first rungs of the timeout ladder (DESIGN.md, invariant 8; `Settings` checks it).
    model_request_timeout_s: float = Field(
        default=30.0, gt=0, description="Timeout of one model request, s."
    )
    model_max_attempts: int = Field(
        default=2,
        ge=1,
        le=10,
        description="Attempts per model request (agentq's own retries of timeouts, dropped "
        "connections and 5xx; the SDK's are off).",
    )
    model_retry_backoff_s: float = Field(
        default=1.0,
        ge=0,
        description="First wait before a failed model request is tried again; doubles per "
        "attempt, s.",
    )
    model_retry_max_s: float = Field(
        default=8.0, ge=0, description="Longest wait between model attempts, s."
    )

    @field_validator("openai_base_url", "openai_api_key", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return blank_is_unset(value)
