"""Which provider a configured name means: the one place that knows every provider class.

`worker.model_calls.providers` defines the protocol and the OpenAI-compatible provider, and
`worker.model_calls.offline` builds on its request and completion types; choosing between them here
keeps either from importing the other back (issue 14: no import cycles, not even inside a function).
"""

from __future__ import annotations

from models.errors import ProviderError
from worker.model_calls.offline import OfflineProvider
from worker.model_calls.providers import (
    PROVIDER_NAMES,
    ChatProvider,
    MaxTokensField,
    OpenAIProvider,
    StructuredOutput,
)


def make_provider(
    name: str,
    *,
    model: str,
    base_url: str | None,
    api_key: str | None,
    request_timeout_s: float,
    structured_output: StructuredOutput = "json_schema",
    max_tokens_field: MaxTokensField = "max_completion_tokens",
    temperature: float | None = None,
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
            structured_output=structured_output,
            max_tokens_field=max_tokens_field,
            temperature=temperature,
        )
    raise ProviderError(f"unknown model provider {name!r}; allowed: {', '.join(PROVIDER_NAMES)}")
