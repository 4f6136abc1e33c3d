"""`agentq worker`, `agentq scheduler`, `agentq sender`, `agentq api`: one deployment process
each, foreground.

Each runs the command line `agentq up` runs (ops/deployment.py) from the configured settings
alone: `AGENTQ_DATABASE_URL` and `AGENTQ_BROKER_URL` (or `DATABASE_URL`, `BROKER_URL`) must be
set; none of them starts or finds the embedded stack. The process is replaced (`os.execve`), not
wrapped, so the SIGTERM of a supervisor (systemd, Docker, Kubernetes) reaches Celery or uvicorn
itself: Celery's warm shutdown stops taking messages and lets running tasks finish (Celery docs,
Workers, "Stopping the worker"); uvicorn stops accepting connections and finishes open requests.
It runs in `/`, so nothing in the caller's directory is imported (ops/stack.py says why); the
settings of the caller's `.env` are passed in its environment (`ops.local.engine_env`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final, NoReturn

import typer

from models.errors import ConfigurationError
from ops.deployment import (
    SCHEDULE_FILE_NAME,
    SCHEDULER_NODE,
    SENDER_CONCURRENCY,
    SENDER_NODE,
    WORKER_NODE,
    api_argv,
    scheduler_argv,
    sender_argv,
    worker_argv,
)

if TYPE_CHECKING:
    from models.settings import Settings

LOG_LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR")


def deployment_env(settings: Settings) -> dict[str, str]:
    """The environment of a deployment process: `ops.local.engine_env` with the configured
    URLs. Raises `ConfigurationError` naming the variable when a URL is unset (a URL that is set
    was checked when the settings were read: `models.settings_connections`)."""
    from ops.local import engine_env  # SQLAlchemy, Celery: not at `agentq --help`

    database = _required(settings.database_url, "AGENTQ_DATABASE_URL")
    broker = _required(settings.broker_url, "AGENTQ_BROKER_URL")
    return engine_env(database, broker)


def _required(url: str | None, variable: str) -> str:
    if not url:
        raise ConfigurationError(
            f"{variable} is not set: a deployment process runs against a Postgres and a broker "
            "that it is given, never the embedded stack (on this machine, run `agentq up`; for "
            "another machine's stack, `agentq up --listen` writes both URLs to its remote.env)"
        )
    return url


def run_foreground(argv: list[str], settings: Settings) -> NoReturn:
    """Replace this process with `argv`, in `/`, with `deployment_env(settings)`, once the
    database answers. Raises before anything runs: `ConfigurationError` (see `deployment_env`),
    and what `models.db.check_reachable` raises for a database it cannot connect to, in one
    line naming AGENTQ_DATABASE_URL (a worker started against it printed Celery's 180-line
    "Unable to load celery application" with the driver's tracebacks)."""
    from models.db import check_reachable  # psycopg, SQLAlchemy: not at `agentq --help`

    env = deployment_env(settings)
    check_reachable(env["AGENTQ_DATABASE_URL"], named="AGENTQ_DATABASE_URL")
    os.chdir("/")
    os.execve(argv[0], argv, env)


def _settings() -> Settings:
    """The settings as the environment and `.env` give them now (never `agentq up`'s). Raises
    `ConfigurationError` naming the variable for a value it cannot take."""
    from models.settings import read_settings

    return read_settings()


def _level(value: str) -> str:
    if value.upper() not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r}; allowed: {', '.join(LOG_LEVELS)}")
    return value.upper()


LogLevel = Annotated[str, typer.Option(callback=_level, help="Log level: DEBUG, INFO, ...")]
NodeHelp = "Celery node name, unique per deployment (`%h`: this machine's host name)."


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Pool processes (default AGENTQ_WORKER_CONCURRENCY)."),
    ] = None,
    name: Annotated[str, typer.Option(help=NodeHelp)] = WORKER_NODE,
    loglevel: LogLevel = "INFO",
) -> None:
    """Run a step worker (queues steps and memory) in the foreground, from AGENTQ_DATABASE_URL
    and AGENTQ_BROKER_URL; SIGTERM lets running steps finish."""
    settings = _settings()
    pool = concurrency or settings.worker_concurrency
    run_foreground(worker_argv(concurrency=pool, hostname=name, loglevel=loglevel), settings)


def scheduler(
    beat: Annotated[
        bool, typer.Option(help="Also run beat (periodic tasks); one sends per deployment.")
    ] = True,
    schedule: Annotated[
        Path | None,
        typer.Option(help="Beat's state file (default $AGENTQ_HOME/celerybeat-schedule)."),
    ] = None,
    name: Annotated[str, typer.Option(help=NodeHelp)] = SCHEDULER_NODE,
    loglevel: LogLevel = "INFO",
) -> None:
    """Run the scheduler (coordinator queue, and beat) in the foreground, from
    AGENTQ_DATABASE_URL and AGENTQ_BROKER_URL; SIGTERM lets a running decision finish."""
    settings = _settings()
    state = None
    if beat:
        state = (schedule or settings.home / SCHEDULE_FILE_NAME).expanduser().resolve()
        state.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    run_foreground(scheduler_argv(schedule=state, hostname=name, loglevel=loglevel), settings)


def sender(
    concurrency: Annotated[
        int, typer.Option(min=1, max=64, help="Pool processes, each sending one pass at a time.")
    ] = SENDER_CONCURRENCY,
    name: Annotated[str, typer.Option(help=NodeHelp)] = SENDER_NODE,
    loglevel: LogLevel = "INFO",
) -> None:
    """Run the webhook sender (webhooks queue) in the foreground, from AGENTQ_DATABASE_URL and
    AGENTQ_BROKER_URL; SIGTERM lets a running pass finish."""
    settings = _settings()
    argv = sender_argv(concurrency=concurrency, hostname=name, loglevel=loglevel)
    run_foreground(argv, settings)


def api(
    host: Annotated[str | None, typer.Option(help="Address (default AGENTQ_API_HOST).")] = None,
    port: Annotated[
        int | None, typer.Option(min=1, max=65535, help="Port (default AGENTQ_API_PORT).")
    ] = None,
) -> None:
    """Serve the HTTP API and the review console in the foreground, from AGENTQ_DATABASE_URL
    and AGENTQ_BROKER_URL; SIGTERM finishes open requests."""
    settings = _settings()
    argv = api_argv(host=host or settings.api_host, port=port or settings.api_port)
    run_foreground(argv, settings)
