"""Model calls made on behalf of a run: budget check, the call, and its recorded usage.

Every call is charged to the run it serves, in Postgres, right after it returns; a run whose token
budget is spent makes no further calls (`BudgetExhausted`).
"""

from __future__ import annotations

from functools import lru_cache

import structlog

from models import transitions
from models.db import session_scope
from models.errors import BudgetExhausted, NotFound
from models.settings import get_settings
from models.tables import Run
from worker.providers import ChatProvider, Completion, ModelRequest, make_provider

log = structlog.get_logger("agentq.worker")


@lru_cache(maxsize=1)
def provider() -> ChatProvider:
    """The configured provider (`AGENTQ_PROVIDER`), built once per process."""
    s = get_settings()
    return make_provider(
        s.provider,
        model=s.model,
        base_url=s.openai_base_url,
        api_key=s.openai_api_key,
        request_timeout_s=s.model_request_timeout_s,
        max_retries=s.model_max_attempts - 1,
    )


def call_model(run_id: int, request: ModelRequest, *, step_id: int | None = None) -> Completion:
    """Make one model call for run `run_id` and record its usage and a `model.call` event.

    Raises `BudgetExhausted` before calling when the run's token budget is spent, `NotFound` for an
    unknown run, and `ProviderError` from the provider.
    """
    with session_scope() as session:
        run = session.get(Run, run_id)
        if run is None:
            raise NotFound(f"run {run_id} does not exist")
        if run.tokens_used >= run.tokens_limit:
            raise BudgetExhausted(
                f"run {run_id}: token budget spent ({run.tokens_used}/{run.tokens_limit})"
            )
    completion = provider().complete(request)
    tokens = completion.prompt_tokens + completion.completion_tokens
    with session_scope() as session:
        transitions.record_usage(
            session, run_id, tokens=tokens, cost_usd=0.0, provider=provider().name
        )
        transitions.record_event(
            session,
            run_id,
            "model.call",
            step_id=step_id,
            purpose=request.purpose,
            model=completion.model,
            offline=completion.offline,
            prompt_tokens=completion.prompt_tokens,
            estimated_prompt_tokens=request.estimated_prompt_tokens,
            completion_tokens=completion.completion_tokens,
            finish_reason=completion.finish_reason,
        )
    log.info("model.call", run_id=run_id, purpose=request.purpose, tokens=tokens)
    return completion
