"""Settings for operating agentq (issue 15): metrics, tracing, logs, notifications, retention.

`models.settings.Settings` inherits these fields, so they are read like every other setting
(`AGENTQ_<NAME>`, `.env`) and reached as `settings.<name>`. They live here only to keep
`models/settings.py` under 400 lines; every field's default is its documented default, and every
feature these switch on is off by default.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings


class OperationsSettings(BaseSettings):
    """Fields of `Settings` for the people who run agentq for others (issue 15)."""

    worker_concurrency: int = Field(default=2, ge=1)
    api_host: str = Field(default="127.0.0.1", description="Where `agentq up` serves the API.")
    api_port: int = Field(default=8765, ge=1, le=65535, description="Port of the HTTP API.")
    # Retention of ended runs (`models.retention`): off unless AGENTQ_RUN_RETENTION_DAYS is set.
    run_retention_days: int | None = Field(
        default=None, ge=1, description="Beat purges runs that ended this many days ago."
    )
    run_retention_batch: int = Field(
        default=500, ge=1, le=10_000, description="Runs purged per transaction."
    )
    run_retention_interval_s: float = Field(
        default=3_600.0, gt=0, description="How often beat purges ended runs, s."
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
