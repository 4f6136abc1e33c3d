"""Celery configuration shared by every process, and the names of every task.

Processes refer to each other's tasks by these registered names (`send_task`), never by import.
The broker is transport only (DESIGN.md, invariant 1): results are not stored, messages are
acknowledged late and requeued when a worker process is lost, and the reconciler re-sends what the
broker loses.

Queues: `steps` (plan, replan, execute step, synthesize: a run's hot path), `memory` (a run's
episode and facts, written by `agentq.remember_run` after the run has ended, off the hot path),
`coordinator`, and `webhooks` (`agentq.deliver_webhooks`, consumed by the webhook sender alone,
`scheduler.sender`: a receiver that hangs holds a sender, never a coordinator decision). A
worker consumes `steps` and `memory` (`WORKER_QUEUES`, as the embedded stack and
docker-compose.yml run it); a deployment may also run workers on `memory` alone, so memory writes
(embeddings, fact extraction) never wait behind steps, nor steps behind them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, Final

import structlog
from celery import Celery
from celery.utils.time import get_exponential_backoff_interval
from kombu.exceptions import ChannelError
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlmodel import Session

from models import sql
from models.db import session_scope
from models.errors import BrokerUnavailable, ConfigurationError, DatabaseUnavailable
from models.settings import Settings, get_settings, read_settings
from models.states import RUN_TERMINAL

log = structlog.get_logger("agentq.queue")

QUEUE_STEPS: Final = "steps"
QUEUE_MEMORY: Final = "memory"
QUEUE_COORDINATOR: Final = "coordinator"
QUEUE_WEBHOOKS: Final = "webhooks"
WORKER_QUEUES: Final = (QUEUE_STEPS, QUEUE_MEMORY)  # what `celery -A worker.app worker` consumes

TASK_COORDINATE: Final = "agentq.coordinate"
TASK_RECONCILE: Final = "agentq.reconcile"
TASK_PLAN: Final = "agentq.plan"
TASK_REPLAN: Final = "agentq.replan"
TASK_EXECUTE_STEP: Final = "agentq.execute_step"
TASK_SYNTHESIZE: Final = "agentq.synthesize"
TASK_REMEMBER_RUN: Final = "agentq.remember_run"
TASK_EXPIRE_MEMORY: Final = "agentq.expire_memory"
TASK_ESCALATION_DEADLINES: Final = "agentq.escalation_deadlines"
TASK_PURGE_RUNS: Final = "agentq.purge_runs"
TASK_DELIVER_WEBHOOKS: Final = "agentq.deliver_webhooks"
TASK_FIRE_SCHEDULES: Final = "agentq.fire_schedules"  # due schedules (models.schedules.fires)
TASK_RAW_NOOP: Final = "agentq.raw_noop"  # benchmark baseline: a plain Celery task

ROUTES: Final = {
    TASK_COORDINATE: {"queue": QUEUE_COORDINATOR},
    TASK_RECONCILE: {"queue": QUEUE_COORDINATOR},
    TASK_PLAN: {"queue": QUEUE_STEPS},
    TASK_REPLAN: {"queue": QUEUE_STEPS},
    TASK_EXECUTE_STEP: {"queue": QUEUE_STEPS},
    TASK_SYNTHESIZE: {"queue": QUEUE_STEPS},
    TASK_REMEMBER_RUN: {"queue": QUEUE_MEMORY},
    TASK_EXPIRE_MEMORY: {"queue": QUEUE_COORDINATOR},
    TASK_ESCALATION_DEADLINES: {"queue": QUEUE_COORDINATOR},
    TASK_PURGE_RUNS: {"queue": QUEUE_COORDINATOR},
    TASK_DELIVER_WEBHOOKS: {"queue": QUEUE_WEBHOOKS},
    TASK_FIRE_SCHEDULES: {"queue": QUEUE_COORDINATOR},
    TASK_RAW_NOOP: {"queue": QUEUE_STEPS},
}


CELERY_BROKER_VARIABLES: Final = (
    "CELERY_BROKER_URL",
    "CELERY_BROKER_READ_URL",
    "CELERY_BROKER_WRITE_URL",
    "CELERY_RESULT_BACKEND",
    "BROKER_URL",
    "CELERY_BROKER",
    "RESULT_BACKEND",
)
"""Environment variables that pick a Celery process's broker or result backend over its app's
configuration: Celery reads the first four at every connection (`Settings.broker_url` and
friends, celery/app/utils.py), and the `celery` command line sets `CELERY_BROKER_URL` and
`CELERY_RESULT_BACKEND` from the last three (`-b`'s and `--result-backend`'s envvars,
celery/bin/celery.py). The engine processes of `agentq up` get them empty (`ops.local`)."""


def broker_url(settings: Settings | None = None) -> str:
    """The broker URL of `settings`, else of the settings as they are now (`read_settings`: a
    new client connects to what the environment says at that moment, as it always has), or
    `ConfigurationError` if none is set."""
    url = (settings or read_settings()).broker_url
    if not url:
        raise ConfigurationError(
            "no broker: set BROKER_URL, or run `agentq up` to start the embedded stack"
        )
    return url


# Seconds a broker socket may wait to connect or for an answer. Above kombu's Redis BRPOP
# timeout (1 s), so a worker's idle wait for a message never trips it.
BROKER_SOCKET_TIMEOUT_S: Final = 5.0
# Publishing is tried twice, 0.5 s apart, so a sender learns of a broker that is down or hung in
# about 2 x BROKER_SOCKET_TIMEOUT_S at worst; the rows are committed and the reconciler re-sends.
SEND_RETRY_POLICY: Final = {"max_retries": 1, "interval_start": 0.5, "interval_step": 0.5}
# Seconds a pool process that replaces a lost one (killed at a hard time limit, out of memory)
# may take to start, its `worker_process_init` handlers included, before the worker kills it
# ("Timed out waiting for UP message"; the processes of the worker's start are not timed).
# Celery's default, 4 s (a setting since celery/celery#1715), is shorter than loading the
# embedding model there (`worker.memory.remembering.warm_up`: torch and sentence-transformers take
# 5-14 s on a 2-core machine), so every replacement would be killed in turn and the pool would
# shrink for good; measured, 12 kills a minute.
WORKER_PROC_ALIVE_TIMEOUT_S: Final = 120.0

# A task that finds the database unavailable (`models.errors.DatabaseUnavailable`) is sent again
# after 1, 2, 4, 4, ... seconds for as long as the outage lasts, never acknowledged as done
# (issue 11: a 5.5 s outage drained 90 steps as failed, left for the reconciler). Celery's
# automatic retry publishes the retry, then acknowledges the message it replaces ("Automatic
# retry for known exceptions", Celery docs, Tasks); when it cannot publish (the broker is down
# too) the message is dropped and the reconciler re-sends what the rows say is waiting. So a
# task runs within OUTAGE_RETRY_MAX_S of Postgres coming back; far below any visibility timeout
# (DESIGN.md, invariant 10).
OUTAGE_RETRY_FIRST_S: Final = 1  # whole seconds: Celery's `retry_backoff` takes an int
OUTAGE_RETRY_MAX_S: Final = 4
OUTAGE_RETRIES: Final[dict[str, Any]] = {
    "autoretry_for": (DatabaseUnavailable,),
    "retry_backoff": OUTAGE_RETRY_FIRST_S,
    "retry_backoff_max": OUTAGE_RETRY_MAX_S,
    "retry_jitter": False,
    "max_retries": None,
}


def outage_countdown_s(retries: int, *, holds_outcome: bool = False) -> float:
    """Seconds before a task that found the database unavailable runs again after `retries`
    retries: 1, 2, 4, 4, ... as `OUTAGE_RETRIES` waits (Celery's own formula); always 1 for a
    task that `holds_outcome`, a step's outcome still to be written (`worker.execution.outages`):
    its lease is no longer renewed, so the outcome must land soon after Postgres is back, before
    the lease (`AGENTQ_LEASE_S` after its last renewal) ends and a wake-up takes the step back to
    run it again."""
    if holds_outcome:
        return float(OUTAGE_RETRY_FIRST_S)
    return float(
        get_exponential_backoff_interval(OUTAGE_RETRY_FIRST_S, retries, OUTAGE_RETRY_MAX_S)
    )


def celery_config(settings: Settings) -> dict[str, Any]:
    """Celery settings (https://docs.celeryq.dev/en/stable/userguide/configuration.html).

    The broker is `broker_url(settings)` for consuming and for sending alike, whatever
    `CELERY_BROKER_URL` says: Celery takes that variable over `broker_url`, but not over
    `broker_read_url` and `broker_write_url`, which every connection uses (celery/app/utils.py).
    """
    url = broker_url(settings)
    return {
        "broker_url": url,
        "broker_read_url": url,
        "broker_write_url": url,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": transport_options(url, settings),
        "broker_connection_timeout": BROKER_SOCKET_TIMEOUT_S,  # AMQP's connect timeout
        "task_routes": ROUTES,
        "task_default_queue": QUEUE_STEPS,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "task_ignore_result": True,
        "result_backend": None,
        "task_soft_time_limit": settings.soft_time_limit_s,
        "task_time_limit": settings.hard_time_limit_s,
        "task_serializer": "json",
        "accept_content": ["json"],
        "worker_send_task_events": False,
        "worker_proc_alive_timeout": WORKER_PROC_ALIVE_TIMEOUT_S,
    }


AMQP_SCHEMES: Final = ("amqp", "amqps", "pyamqp")


def transport_options(url: str, settings: Settings) -> dict[str, Any]:
    """kombu's transport options for the broker of `url`, which differ by transport.

    Redis: an unacknowledged message returns to the queue after the visibility timeout, and a
    broker that accepts connections but never answers (paused, overloaded) must not hang a
    sender: without socket timeouts the Redis client waits forever (celery/celery#1221).
    RabbitMQ (`amqp://`): there is no visibility timeout; an unacknowledged message returns when
    its consumer's connection closes, or when RabbitMQ's `consumer_timeout` (30 min by default;
    RabbitMQ docs, "Consumers", "Delivery Acknowledgement Timeout") closes its channel, which
    plays the top rung of the timeout ladder: keep it above `AGENTQ_VISIBILITY_TIMEOUT_S`.
    Publisher confirms are on (kombu's pyamqp transport, "Publisher confirms"): a send returns
    once RabbitMQ holds the message, and a message it refuses raises instead of vanishing.
    """
    if url.partition("://")[0] in AMQP_SCHEMES:
        return {"confirm_publish": True}
    return {
        "visibility_timeout": settings.visibility_timeout_s,
        "socket_timeout": BROKER_SOCKET_TIMEOUT_S,
        "socket_connect_timeout": BROKER_SOCKET_TIMEOUT_S,
    }


# The tasks of a run, by what their first arguments name: `(run_id, ...)` or `(step_id, ...)`.
RUN_TASKS: Final = frozenset(
    {TASK_COORDINATE, TASK_PLAN, TASK_REPLAN, TASK_SYNTHESIZE, TASK_REMEMBER_RUN}
)


def task_subject(task: str, args: tuple[Any, ...]) -> tuple[int | None, int | None]:
    """`(run_id, step_id)` that a message of `task` with `args` is about, each None where the
    task does not name it: `agentq.replan(run_id, step_id)`, `agentq.execute_step(step_id)`,
    `agentq.plan(run_id)` and the other run tasks; `(None, None)` for periodic work."""
    if task == TASK_EXECUTE_STEP and args:
        return None, int(args[0])
    if task in RUN_TASKS and args:
        step_id = int(args[1]) if task == TASK_REPLAN and len(args) > 1 else None
        return int(args[0]), step_id
    return None, None


def make_celery(main: str, settings: Settings | None = None) -> Celery:
    """A Celery app configured from `settings` (default: the settings as they are now,
    `read_settings`, so a new app connects to the broker the environment names then)."""
    app = Celery(main)
    app.conf.update(celery_config(settings or read_settings()))
    return app


_client: dict[int, Celery] = {}


def client() -> Celery:
    """A Celery app used only to send messages, one per process."""
    pid = os.getpid()
    if pid not in _client:
        _client[pid] = make_celery("agentq-client")
    return _client[pid]


def held_back(countdown: float | None, settings: Settings | None = None) -> bool:
    """Whether a message due `countdown` seconds from now is too far off for the broker: over
    half the visibility timeout. A worker holds a countdown message unacknowledged until it is
    due, and Redis hands an unacknowledged message to another worker after the visibility
    timeout, early (kombu#337); so such a delay waits in Postgres (DESIGN.md, invariant 10)."""
    visibility = (settings or get_settings()).visibility_timeout_s
    return countdown is not None and countdown > visibility / 2


class Sent:
    """What `send_task` hands back here: the message's id alone. Celery's `AsyncResult` reads the
    app's result backend, which Celery keeps per thread and builds by scanning every installed
    package's entry points (`celery.app.backends.by_url`): in the API's thread pool that was 6%
    of a submit's CPU (issue 29's profile), for a result agentq never asks for."""

    __slots__ = ("id", "ignored")

    def __init__(self, task_id: str) -> None:
        self.id = task_id
        self.ignored = True


def send(task: str, *args: Any, countdown: float | None = None) -> None:
    """Send `task` by its registered name to its queue. Call only after the commit it announces.

    A `countdown` too long for the broker (`held_back`) is not sent: every caller's row already
    holds the time it is due (a step's `queued_at`, a deferred phase's `updated_at`), and the
    reconciler sends it at its first tick after that time (`models.engine.held`). Raises
    `BrokerUnavailable` when the broker cannot be reached (the reconciler re-sends what the rows
    say is waiting, so a caller may report it and carry on). No result is ever asked for, so a
    result backend named by `CELERY_RESULT_BACKEND` is never contacted either.
    """
    if task not in ROUTES:
        raise ValueError(f"unknown task {task!r}; known: {', '.join(ROUTES)}")
    if held_back(countdown):
        log.info("queue.held_in_postgres", task=task, args=list(args), due_in_s=countdown)
        return
    try:
        client().send_task(
            task,
            args=list(args),
            countdown=countdown,
            retry=True,
            retry_policy=SEND_RETRY_POLICY,
            ignore_result=True,  # else send_task subscribes to the result backend first
            result_cls=Sent,  # Celery's AsyncResult loads the backend once per thread
            add_to_parent=False,  # a step's task keeps no trail of what it sent
            **ROUTES[task],
        )
    except (KombuOperationalError, OSError) as exc:
        raise BrokerUnavailable(f"could not send {task}: {exc}") from exc


def try_send(task: str, *args: Any) -> bool:
    """`send`, after the commit it announces, where a broker that is down is not an error: the
    rows are committed and the reconciler re-sends what they say is waiting once the broker is
    back. Returns False when the broker could not be reached."""
    try:
        send(task, *args)
    except BrokerUnavailable:
        return False
    return True


def depth(name: str) -> int | None:
    """Messages waiting in queue `name` of the broker, not yet delivered to a worker (kombu's
    passive `queue_declare`: for Redis the lengths of the queue's lists, for AMQP its ready
    count); 0 for a queue never declared; None when the broker cannot be asked."""
    try:
        with client().connection_for_write() as connection:
            channel = connection.default_channel
            try:
                return int(channel.queue_declare(queue=name, passive=True).message_count)
            except ChannelError:  # no such queue: nothing was ever sent to it
                return 0
    except (KombuOperationalError, OSError):
        return None


BROKER_EPOCH_KEY: Final = "agentq:broker-epoch"
"""A Redis key agentq sets once and never deletes: its absence means the broker is new or came
back empty (the embedded Redis keeps nothing on disk), so every message it held is gone."""


def broker_restarted(key: str = BROKER_EPOCH_KEY) -> bool | None:
    """Whether the broker lost its memory since the last call from any process: for a Redis
    broker, `SET key <now> NX` through the Celery client's connection, True when `key` was absent
    (set now, so the next call answers False). None when it cannot be told: a broker other than
    Redis (AMQP keeps its queues on disk; the reconciler keeps its stale times there) or one that
    cannot be reached. The first call after `agentq up` answers True too, which is right: the
    embedded Redis starts empty. A network call: ask it before, never inside, a transaction."""
    try:
        with client().connection_for_write() as connection:
            if connection.transport.driver_type != "redis":
                return None
            redis = connection.default_channel.client  # kombu's redis-py client for publishing
            try:
                return bool(redis.set(key, datetime.now(UTC).isoformat(), nx=True))
            except connection.connection_errors:
                return None
    except (KombuOperationalError, OSError):
        return None


def send_all(sends: Iterable[tuple[str, tuple[Any, ...]]]) -> bool:
    """Send each `(task, args)` in order, after the commit they announce (`try_send`); after the
    first the broker refuses the rest are not tried either, so a sender waits out a broker that
    is down once, not once per message: the reconciler re-sends what the rows say is waiting.
    Returns whether every one was sent (True when there was none)."""
    return all(try_send(task, *args) for task, args in sends)  # all() stops at the first False


def follow_up(run_id: int, status: str) -> bool:
    """After a commit that decided for a run (a reviewer's decision, a cancel, a passed
    deadline), send what comes next for a run now in `status`: `agentq.remember_run` for a run
    that has ended (its episode and facts are written on the `memory` queue; a run that ends in
    synthesis sends it there itself), and `agentq.coordinate` in any case (an ended run's
    cancelled steps freed dispatch slots of its user, which the coordinator fills:
    `models.engine.dispatch`). An ended child run's parent is sent `agentq.coordinate` too: its
    step waiting for the child ends (`models.engine.children`). Returns False when the broker
    could not be reached (`try_send`; an ended run's episode is then not written)."""
    if status in RUN_TERMINAL:
        if not try_send(TASK_REMEMBER_RUN, run_id):
            return False
        with session_scope() as session:
            wakes = wake_parent(session, run_id)
        for task, args in wakes:
            try_send(task, *args)
    return try_send(TASK_COORDINATE, run_id)


def wake_parent(session: Session, run_id: int) -> list[tuple[str, tuple[int, ...]]]:
    """What to send once run `run_id` has ended: `agentq.coordinate` for its parent, if it is a
    child run (the parent's step waiting for it ends in that decision: `models.engine.children`);
    nothing else. Read from `run_children` by hand here, so this module imports no domain table."""
    parent = sql.scalar(session, PARENT_OF, {"run_id": run_id})
    return [(TASK_COORDINATE, (int(parent),))] if parent is not None else []


PARENT_OF: Final = "SELECT parent_run_id FROM run_children WHERE run_id = :run_id"
