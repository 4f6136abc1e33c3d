"""The command lines of agentq's processes: one definition for every way they are started.

`agentq up` (ops/local.py) starts them as children of the embedded stack; `agentq worker`,
`agentq scheduler` and `agentq api` (ops/deployment_commands.py) exec them in the foreground on
a deployment machine, as docker-compose.yml runs them:
- worker: `celery -A worker.app worker -Q steps,memory -c N -n steps@%h --pool prefork`;
- scheduler: `celery -A scheduler.app worker -Q coordinator -c 1 -n coordinator@%h -B -s FILE`
  (beat in the same process; a second scheduler without `-B` only takes coordinator messages);
- sender: `celery -A scheduler.sender worker -Q webhooks -c N -n webhooks@%h` (webhook
  deliveries only, so a receiver that hangs never holds a coordinator decision);
- api: `uvicorn api.app:create_app --factory --no-access-log --host H --port P`.
Python runs with `-P`, so the current directory is not put on `sys.path` (ops/stack.py says why).
Light to import (no Celery): `agentq --help` loads it (tests/acceptance/test_first_run.py).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Final

WORKER_APP: Final = "worker.app"
SCHEDULER_APP: Final = "scheduler.app"
API_APP_FACTORY: Final = "api.app:create_app"
WORKER_NODE: Final = "steps@%h"  # Celery node names; `%h` is the machine's host name
SCHEDULER_NODE: Final = "coordinator@%h"
SENDER_APP: Final = "scheduler.sender"
SENDER_NODE: Final = "webhooks@%h"
SENDER_CONCURRENCY: Final = 2  # passes at once: a pass held by a hanging receiver leaves one
SCHEDULE_FILE_NAME: Final = "celerybeat-schedule"
DEFAULT_POSTGRES_PORT: Final = 5432  # the ports of `agentq up --listen`: their usual numbers
DEFAULT_REDIS_PORT: Final = 6379  # (IANA registry)


def celery_argv(
    app: str,
    queue: str,
    *,
    concurrency: int,
    hostname: str,
    schedule: Path | None = None,
    loglevel: str = "INFO",
) -> list[str]:
    """A prefork Celery worker of `app` on `queue` (one name, or several joined by commas: `-Q`
    takes a list; it logs "ready." once consuming), `concurrency` pool processes, node name
    `hostname`; with a `schedule` file it also runs the beat scheduler (`-B -s schedule`)."""
    argv = [sys.executable, "-P", "-m", "celery", "-A", app, "worker", "-Q", queue]
    argv += ["-c", str(concurrency), "-n", hostname, "--pool", "prefork", "-l", loglevel]
    if schedule is not None:
        argv += ["-B", "-s", str(schedule)]
    return argv


def worker_argv(
    *, concurrency: int, hostname: str = WORKER_NODE, loglevel: str = "INFO"
) -> list[str]:
    """The step worker: `celery_argv` of `worker.app` on `models.engine.queue.WORKER_QUEUES`."""
    from models.engine.queue import WORKER_QUEUES

    queues = ",".join(WORKER_QUEUES)
    return celery_argv(
        WORKER_APP, queues, concurrency=concurrency, hostname=hostname, loglevel=loglevel
    )


def scheduler_argv(
    *, schedule: Path | None, hostname: str = SCHEDULER_NODE, loglevel: str = "INFO"
) -> list[str]:
    """The scheduler: one coordinator process on the `coordinator` queue, with beat when
    `schedule` (its state file) is given; one beat per deployment sends (scheduler/beat.py)."""
    from models.engine.queue import QUEUE_COORDINATOR

    return celery_argv(
        SCHEDULER_APP,
        QUEUE_COORDINATOR,
        concurrency=1,
        hostname=hostname,
        schedule=schedule,
        loglevel=loglevel,
    )


def sender_argv(
    *, concurrency: int = SENDER_CONCURRENCY, hostname: str = SENDER_NODE, loglevel: str = "INFO"
) -> list[str]:
    """The webhook sender: `celery_argv` of `scheduler.sender` on the `webhooks` queue."""
    from models.engine.queue import QUEUE_WEBHOOKS

    return celery_argv(
        SENDER_APP, QUEUE_WEBHOOKS, concurrency=concurrency, hostname=hostname, loglevel=loglevel
    )


def api_argv(*, host: str, port: int, app_factory: str = API_APP_FACTORY) -> list[str]:
    """Uvicorn serving the ASGI app that `app_factory` (`module:function`) builds, on
    `host`:`port`; it logs "Uvicorn running on" once it accepts connections. Its access log is
    off: it writes query strings, where a client may put a token; the app logs each request's
    method, path, status and duration instead (`api.access_log`)."""
    argv = [sys.executable, "-P", "-m", "uvicorn", app_factory, "--factory", "--no-access-log"]
    return [*argv, "--host", host, "--port", str(port), "--log-level", "info"]
