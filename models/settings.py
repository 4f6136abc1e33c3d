"""Settings for every agentq process, read from the environment and `.env`.

Every variable is `AGENTQ_<NAME>` (for example `AGENTQ_PROVIDER=openai`); the two connection URLs
are also read from the conventional `DATABASE_URL` and `BROKER_URL`, and the key from
`OPENAI_API_KEY`. With nothing set, agentq uses the embedded local stack (see `ops/stack.py`).
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.errors import ConfigurationError


class Settings(BaseSettings):
    """All of agentq's configuration; each field's default is the documented default."""

    model_config = SettingsConfigDict(env_prefix="AGENTQ_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENTQ_DATABASE_URL", "DATABASE_URL"),
        description="SQLAlchemy URL of Postgres with pgvector; unset: the embedded server.",
    )
    broker_url: str | None = Field(
        default=None,
        validation_alias=AliasChoices("AGENTQ_BROKER_URL", "BROKER_URL"),
        description="Celery broker URL (redis:// or amqp://); unset: the embedded Redis.",
    )
    home: Path = Field(default=Path.home() / ".agentq", description="Data directory.")

    provider: Literal["offline", "openai"] = "offline"
    model: str = "gpt-4o-mini"
    openai_base_url: str | None = None
    openai_api_key: str | None = Field(
        default=None, validation_alias=AliasChoices("AGENTQ_OPENAI_API_KEY", "OPENAI_API_KEY")
    )

    # The timeout ladder (DESIGN.md, invariant 8), all in seconds.
    model_request_timeout_s: float = Field(default=30.0, gt=0)
    model_max_attempts: int = Field(default=2, ge=1, le=10)
    step_time_limit_s: float = Field(default=90.0, gt=0)
    soft_time_limit_s: float = Field(default=120.0, gt=0)
    hard_time_limit_s: float = Field(default=150.0, gt=0)
    visibility_timeout_s: float = Field(default=3600.0, gt=0)
    lease_s: float = Field(default=180.0, gt=0, description="Step lease; > hard time limit.")

    step_max_attempts: int = Field(default=3, ge=1, le=20)
    retry_backoff_s: float = Field(default=1.0, ge=0)
    plan_max_attempts: int = Field(default=3, ge=1, le=10)
    queued_stale_s: float = Field(default=60.0, gt=0, description="Re-send a queued step after.")
    phase_stale_s: float = Field(default=120.0, gt=0, description="Re-send plan/synthesize after.")
    reconcile_interval_s: float = Field(default=10.0, gt=0)

    default_replan_budget: int = Field(default=2, ge=0)
    default_token_budget: int = Field(default=200_000, ge=0)
    default_cost_budget_usd: float = Field(default=1.0, ge=0)
    default_wall_time_budget_s: float = Field(default=3600.0, gt=0)

    embedding_provider: Literal["local", "openai", "hash"] = "local"
    embedding_model: str | None = Field(default=None, description="Provider's default if unset.")
    embedding_dim: int | None = Field(default=None, ge=1, le=4096)
    context_window_tokens: int = Field(default=128_000, ge=1024)
    reserved_output_tokens: int = Field(default=4_096, ge=64)
    context_safety_margin: float = Field(default=0.05, ge=0, lt=0.5)
    tool_result_max_tokens: int = Field(default=1_000, ge=50)
    summary_max_tokens: int = Field(default=800, ge=50)
    recall_facts_k: int = Field(default=5, ge=0, le=100)
    recall_episodes_k: int = Field(default=3, ge=0, le=100)
    recall_share: float = Field(default=0.3, gt=0, le=1)
    recall_min_similarity: float | None = Field(default=None, ge=-1, le=1)
    fact_ttl_s: dict[str, float] = {"event": 30 * 86_400.0}
    memory_expiry_interval_s: float = Field(default=3_600.0, gt=0)

    worker_concurrency: int = Field(default=2, ge=1)
    tool_modules: list[str] = ["worker.tools.builtin", "worker.tools.expenses"]

    @field_validator(
        "database_url", "broker_url", "openai_base_url", "openai_api_key", mode="before"
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @model_validator(mode="after")
    def _check_timeout_ladder(self) -> Settings:
        check_timeout_ladder(self)
        if self.reserved_output_tokens >= self.context_window_tokens:
            raise ConfigurationError(
                f"AGENTQ_RESERVED_OUTPUT_TOKENS ({self.reserved_output_tokens}) must be less than "
                f"AGENTQ_CONTEXT_WINDOW_TOKENS ({self.context_window_tokens})"
            )
        return self


def check_timeout_ladder(s: Settings) -> None:
    """Refuse settings that break DESIGN.md invariant 8.

    model request timeout x attempts < step time limit < soft time limit < hard time limit <
    lease < broker visibility timeout. The lease sits above the hard limit so a live attempt never
    loses its step, and below the visibility timeout so the reconciler acts before the broker
    redelivers. Raises `ConfigurationError` naming the first pair out of order.
    """
    rungs = [
        (
            "AGENTQ_MODEL_REQUEST_TIMEOUT_S x AGENTQ_MODEL_MAX_ATTEMPTS",
            s.model_request_timeout_s * s.model_max_attempts,
        ),
        ("AGENTQ_STEP_TIME_LIMIT_S", s.step_time_limit_s),
        ("AGENTQ_SOFT_TIME_LIMIT_S", s.soft_time_limit_s),
        ("AGENTQ_HARD_TIME_LIMIT_S", s.hard_time_limit_s),
        ("AGENTQ_LEASE_S", s.lease_s),
        ("AGENTQ_VISIBILITY_TIMEOUT_S", s.visibility_timeout_s),
    ]
    for (low_name, low), (high_name, high) in itertools.pairwise(rungs):
        if not low < high:
            raise ConfigurationError(
                f"timeout ladder broken: {low_name} ({low:g} s) must be less than "
                f"{high_name} ({high:g} s)"
            )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once. Raises `ConfigurationError` on an invalid value."""
    try:
        return Settings()
    except ConfigurationError:
        raise
    except ValueError as exc:  # pydantic's ValidationError names the field and the rule
        cause = exc.__cause__ if isinstance(exc.__cause__, ConfigurationError) else None
        raise ConfigurationError(str(cause or exc)) from exc
