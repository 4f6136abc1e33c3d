"""The engine's settings for a local model served by llama-cpp-python (`ops.llama_server`): the
README's "Running on a local model" settings, in one place for `agentq demo --model`, the
agent-tasks benchmark (`ops.bench.agent_tasks --provider local`) and the tests.

Why each: llama-cpp-python's server refuses OpenAI's `json_schema` response format and compiles
`json_object` with a schema into a grammar (`AGENTQ_STRUCTURED_OUTPUT=json_object`); it ignores
`max_completion_tokens` (`AGENTQ_MAX_TOKENS_FIELD=max_tokens`); the model is free; one attempt of
`model_timeout_s` per call, because a 2-core machine reads a plan prompt in 30-60 s, with the
step limits above it as the timeout ladder requires (DESIGN.md).
"""

from __future__ import annotations

import json
from typing import Final

# `agentq demo --model`: its help, here so that the command tree builds without the model server
MODEL_HELP: Final = (
    "offline, or a local model served here: local (smollm2), gemma3; default: the configured "
    "provider."
)
CONTEXT_TOKENS: Final = 8192  # the server's --n_ctx (SmolLM2's training context)
MODEL_TIMEOUT_S: Final = 120.0  # per model call; each step limit above it by STEP_LIMIT_MARGINS_S
STEP_LIMIT_MARGINS_S: Final = {
    "AGENTQ_STEP_TIME_LIMIT_S": 30.0,
    "AGENTQ_SOFT_TIME_LIMIT_S": 45.0,
    "AGENTQ_HARD_TIME_LIMIT_S": 55.0,
}


def local_env(
    alias: str,
    base_url: str,
    *,
    model_timeout_s: float = MODEL_TIMEOUT_S,
    context_tokens: int = CONTEXT_TOKENS,
) -> dict[str, str]:
    """`AGENTQ_*` settings for model `alias` served at `base_url` (an OpenAI base URL, `.../v1`):
    the provider, structured output, answer cap, price 0, context window, and the timeout
    ladder for one attempt of `model_timeout_s` seconds."""
    limits = {name: f"{model_timeout_s + m:g}" for name, m in STEP_LIMIT_MARGINS_S.items()}
    return {
        "AGENTQ_PROVIDER": "openai",
        "AGENTQ_MODEL": alias,
        "AGENTQ_OPENAI_BASE_URL": base_url,
        "OPENAI_API_KEY": "local",  # the SDK wants one; the server checks none
        "AGENTQ_STRUCTURED_OUTPUT": "json_object",
        "AGENTQ_MAX_TOKENS_FIELD": "max_tokens",
        "AGENTQ_MODEL_PRICES_USD_PER_MTOK": json.dumps({alias: {"input": 0, "output": 0}}),
        "AGENTQ_CONTEXT_WINDOW_TOKENS": str(context_tokens),
        "AGENTQ_RESERVED_OUTPUT_TOKENS": "512",
        "AGENTQ_MODEL_MAX_ATTEMPTS": "1",
        # greedy: a plan is a structured answer, and at the server's default 0.8 SmolLM2 now and
        # then wrote its own steps past the recalled procedure it adopts when greedy
        "AGENTQ_MODEL_TEMPERATURE": "0",
        "AGENTQ_MODEL_REQUEST_TIMEOUT_S": f"{model_timeout_s:g}",
        "NO_PROXY": "127.0.0.1,localhost",
        **limits,
    }
