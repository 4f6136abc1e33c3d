"""The model server's own token count of a prompt, when it offers one (`AGENTQ_TOKENIZER`).

Two servers count with the model's own vocabulary, at their root (beside `/v1`): llama.cpp's,
`POST /tokenize` (`{"content": text}` -> `{"tokens": [ids]}`, tools/server/README.md), and
llama-cpp-python's, `POST /extras/tokenize/count` (`{"input": text}` -> `{"count": n}`,
llama_cpp/server/app.py). `ServerTokenizer.count` sends a request's whole prompt to the first
that answers, once, its messages' texts joined, and adds the per-message overhead we count for
any chat format (`models.memory.tokens.count_message_tokens`) and our estimate of the schemas and
tools (which the server renders through its chat template, and a tokenizer endpoint does not see).
`worker.model_calls.refits.Fitted` asks it before a call is first sent, and rebuilds a request it
finds too long for the window as it would after the server's refusal: no refused call.

`server` asks every time (a failure is logged and the call goes ahead on our own count);
`auto` stops asking, for the life of the process, once neither endpoint answers (OpenAI's API
and vLLM have neither); `tiktoken` (the default) never asks. The offline provider has no server
and never asks.
"""

from __future__ import annotations

import functools
import json
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any, Final

import structlog

from models.memory.tokens import REPLY_PRIMING_TOKENS, TOKENS_PER_MESSAGE, count_tool_schema_tokens
from models.settings import get_settings

log = structlog.get_logger("agentq.worker")
# llama.cpp tokenizes thousands of tokens in milliseconds; a server that takes longer is busy
# or not llama.cpp, and the call goes ahead on our count rather than wait (the timeout ladder,
# DESIGN.md invariant 8, budgets the model request, not this).
TOKENIZE_TIMEOUT_S: Final = 2.0


def _ids(answer: Any) -> int:
    return len(answer["tokens"])


def _count(answer: Any) -> int:
    return int(answer["count"])


# Each endpoint: its path, the field that carries the text, and how its answer gives the count.
ENDPOINTS: Final[tuple[tuple[str, str, Callable[[Any], int]], ...]] = (
    ("/tokenize", "content", _ids),
    ("/extras/tokenize/count", "input", _count),
)


class ServerTokenizer:
    """The tokenizer endpoint of the server at `base_url` (`http://host:8080/v1` -> root
    `http://host:8080`): the first of `ENDPOINTS` that answers, then that one only; `sticky`
    (auto): when none answers, it is not asked again."""

    def __init__(self, base_url: str, *, sticky: bool, api_key: str | None = None) -> None:
        root = base_url.rstrip("/")
        self.root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.sticky = sticky
        self.api_key = api_key
        self.offered = True
        self.endpoints = list(ENDPOINTS)

    def count(
        self, messages: Sequence[dict[str, Any]], extras: Sequence[dict[str, Any]]
    ) -> int | None:
        """The server's tokens of `messages` (OpenAI chat messages), plus the per-message
        overhead and our estimate of `extras` (the answer's schema, tool definitions); None when
        the server did not say (then, if sticky, it is not asked again)."""
        if not self.offered:
            return None
        texts = [_text(value) for m in messages for key, value in m.items() if key != "role"]
        tokens = self._tokenize("\n".join(t for t in texts if t))
        if tokens is None:
            self.offered = not self.sticky
            return None
        overhead = REPLY_PRIMING_TOKENS + TOKENS_PER_MESSAGE * len(messages)
        return tokens + overhead + (count_tool_schema_tokens(list(extras)) if extras else 0)

    def _tokenize(self, text: str) -> int | None:
        for endpoint in self.endpoints:
            path, field, read = endpoint
            try:
                tokens = read(self._post(path, {field: text}))
            except (OSError, ValueError, KeyError, TypeError) as exc:  # URLError, timeouts, JSON
                log.info("tokenize.unanswered", url=self.root + path, error=str(exc))
                continue
            self.endpoints = [endpoint]  # the one this server offers
            return tokens
        log.warning("tokenize.unavailable", url=self.root, tried=[p for p, _, _ in self.endpoints])
        return None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        request = urllib.request.Request(self.root + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=TOKENIZE_TIMEOUT_S) as response:
            return json.loads(response.read())


def _text(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@functools.lru_cache(maxsize=1)
def server_tokenizer() -> ServerTokenizer | None:
    """The configured server's tokenizer (built once per process), or None: `AGENTQ_TOKENIZER`
    is `tiktoken`, the provider is offline, or no base URL names the server."""
    s = get_settings()
    if s.tokenizer == "tiktoken" or s.provider != "openai" or not s.openai_base_url:
        return None
    return ServerTokenizer(
        s.openai_base_url, sticky=s.tokenizer == "auto", api_key=s.openai_api_key
    )
