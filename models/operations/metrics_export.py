"""Where the metrics of `models.operations.metrics` are written and how they are served (issue 15).

prometheus-client's multiprocess mode: each process of a Celery pool writes its values to files
named by its pid under one directory, `AGENTQ_METRICS_DIR` (default `<AGENTQ_HOME>/metrics`),
and a scrape adds up every file there (prometheus-client docs, "Multiprocess Mode"). The
processes that share a directory must be one deployment on one machine, and the directory must
be emptied before they start (`agentq up` empties its own: `ops.local`); scrape one process per
directory, or its counts are counted twice.

- The worker and the scheduler call `record_in` from their main process at start-up, before
  the pool forks, and `forget_process` when a pool process exits (Celery's
  `worker_process_shutdown`); with `AGENTQ_METRICS_PORT` set, `serve` starts prometheus-client's
  HTTP server in that main process.
- The API serves `/metrics` (`exposition`) from the same directory, plus the gauges read from
  the database and the broker (`models.operations.metric_gauges`).

A process's files are named by `<host name>-<pid>` (`process_id`), not the pid alone: with Docker
Compose the directory is a volume shared by containers (docker-compose.yml), whose pids repeat
from one container to the next, and each container has its own host name.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Final

import structlog
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    multiprocess,
    start_http_server,
    values,
)

from models.operations.metric_gauges import DatabaseCollector
from models.settings import Settings

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"  # read by prometheus-client itself
log = structlog.get_logger("agentq.metrics")


def metrics_dir(settings: Settings) -> Path:
    """`AGENTQ_METRICS_DIR`, or `<AGENTQ_HOME>/metrics` when it is unset; absolute."""
    chosen = settings.metrics_dir or settings.home / "metrics"
    return chosen.expanduser().resolve()


def record_in(directory: Path) -> None:
    """Make this process (and the processes it forks later) write its metrics under `directory`
    (created, 0700). prometheus-client picks its value class when `prometheus_client.values` is
    first imported, from `PROMETHEUS_MULTIPROC_DIR` (values.py, `ValueClass =
    get_value_class()`), and our modules import it before start-up code runs; so the variable is
    set and the class chosen again here, naming its files by `process_id`. No value exists yet:
    every metric of `models.operations.metrics` has labels, and a labelled metric makes its values
    at its first `.labels(...)`."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(directory)
    value_class = values.MultiProcessValue(process_identifier=process_id)  # type: ignore[no-untyped-call]
    values.ValueClass = value_class


def process_id(pid: int | None = None) -> str:
    """`<host name>-<pid>` of process `pid` on this host (default: this process): the name of its
    files in the metrics directory, unique across the containers that share one."""
    return f"{socket.gethostname()}-{os.getpid() if pid is None else pid}"


def forget_process(pid: int, directory: Path) -> None:
    """Drop the live gauges of pool process `pid` (of this host), which exited
    (`multiprocess.mark_process_dead`; its counters and histograms stay: what it counted
    happened)."""
    multiprocess.mark_process_dead(process_id(pid), str(directory))  # type: ignore[no-untyped-call]


def registry(settings: Settings, *, database: bool) -> CollectorRegistry:
    """A registry of every process's metrics under `metrics_dir` (when it exists yet) and, with
    `database`, the gauges of rows and queues."""
    found = CollectorRegistry()
    directory = metrics_dir(settings)
    if directory.is_dir():
        multiprocess.MultiProcessCollector(found, path=str(directory))  # type: ignore[no-untyped-call]
    if database:
        found.register(DatabaseCollector())
    return found


def exposition(settings: Settings) -> tuple[bytes, str]:
    """The text exposition of `registry(settings, database=True)` and its content type."""
    return generate_latest(registry(settings, database=True)), CONTENT_TYPE_LATEST


def serve(settings: Settings, *, database: bool) -> None:
    """With `AGENTQ_METRICS_PORT` set, serve `registry(settings, database=...)` on
    `AGENTQ_METRICS_HOST`:`AGENTQ_METRICS_PORT` from a daemon thread of this process; a port that
    cannot be listened on is logged (`metrics.unserved`) and the process goes on without it."""
    if settings.metrics_port is None:
        return
    try:
        start_http_server(
            settings.metrics_port,
            addr=settings.metrics_host,
            registry=registry(settings, database=database),
        )
    except OSError as exc:
        log.error(
            "metrics.unserved",
            setting="AGENTQ_METRICS_PORT",
            port=settings.metrics_port,
            error=str(exc),
        )
        return
    log.info("metrics.serving", host=settings.metrics_host, port=settings.metrics_port)
