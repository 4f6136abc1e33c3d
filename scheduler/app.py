"""The scheduler's Celery app: `celery -A scheduler.app worker -Q coordinator -B`.

It consumes the `coordinator` queue and runs one beat that sends `agentq.reconcile` and
`agentq.escalation_deadlines` every `AGENTQ_RECONCILE_INTERVAL_S` seconds,
`agentq.expire_memory` every `AGENTQ_MEMORY_EXPIRY_INTERVAL_S`, `agentq.deliver_webhooks` every
`AGENTQ_WEBHOOK_POLL_INTERVAL_S` (to the `webhooks` queue: the webhook sender runs it,
`scheduler.sender`, never this process), `agentq.fire_schedules` every
`AGENTQ_SCHEDULE_POLL_INTERVAL_S` (goals on a schedule: `models.schedules.fires`, whose rows make
a due time fire once however many beats send it) and, with `AGENTQ_RUN_RETENTION_DAYS` set,
`agentq.purge_runs` every `AGENTQ_RUN_RETENTION_INTERVAL_S`: one beat per database, the one that
holds the beat lock (`scheduler.beat`). The beat and the pool process die with the main process
(`models.orphans`), so a killed scheduler leaves no beat sending.

A coordinate task that finds the database unavailable sends itself again after a backoff
(`models.engine.queue.OUTAGE_RETRIES`) instead of being acknowledged as done; it decides from the
rows under the run's lock, so running it again is harmless. The periodic tasks are not retried: the
next beat does their work.
"""

from __future__ import annotations

import os
from typing import Any, Final

from celery.signals import (
    beat_embedded_init,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)

from models.db import dispose_engines
from models.engine import stack_limits, tracing
from models.engine.queue import (
    OUTAGE_RETRIES,
    QUEUE_COORDINATOR,
    TASK_COORDINATE,
    TASK_DELIVER_WEBHOOKS,
    TASK_ESCALATION_DEADLINES,
    TASK_EXPIRE_MEMORY,
    TASK_FIRE_SCHEDULES,
    TASK_PURGE_RUNS,
    TASK_RECONCILE,
    make_celery,
)
from models.operations import metrics, metrics_export
from models.operations.logs import configure_logging, task_bound
from models.orphans import die_with_parent
from models.settings import get_settings
from scheduler import tasks

MAIN_PID: Final = os.getpid()  # `celery worker` imports this module before it forks
configure_logging()
settings = get_settings()
app = make_celery("agentq-scheduler", settings)
app.conf.task_default_queue = QUEUE_COORDINATOR
app.conf.beat_scheduler = "scheduler.beat:LockedScheduler"
app.conf.beat_schedule = {
    "reconcile": {"task": TASK_RECONCILE, "schedule": settings.reconcile_interval_s},
    "expire-memory": {"task": TASK_EXPIRE_MEMORY, "schedule": settings.memory_expiry_interval_s},
    # A passed review deadline is applied within one reconcile interval; the query is one
    # partial-index scan, cheap enough to share the reconciler's period.
    "escalation-deadlines": {
        "task": TASK_ESCALATION_DEADLINES,
        "schedule": settings.reconcile_interval_s,
    },
    # Due webhook deliveries, for the webhook sender (`scheduler.sender`); a tick not taken
    # within its interval is dropped, as the next one claims the same rows.
    "deliver-webhooks": {
        "task": TASK_DELIVER_WEBHOOKS,
        "schedule": settings.webhook_poll_interval_s,
        "options": {"expires": settings.webhook_poll_interval_s},
    },
    # Due schedules; a tick not taken within its interval is dropped, as the next one fires the
    # same due times (their rows are the claim: models.schedules.fires).
    "fire-schedules": {
        "task": TASK_FIRE_SCHEDULES,
        "schedule": settings.schedule_poll_interval_s,
        "options": {"expires": settings.schedule_poll_interval_s},
    },
}
if settings.run_retention_days is not None:
    app.conf.beat_schedule["purge-runs"] = {
        "task": TASK_PURGE_RUNS,
        "schedule": settings.run_retention_interval_s,
    }


@app.task(name=TASK_COORDINATE, **OUTAGE_RETRIES)  # type: ignore[untyped-decorator]
def coordinate(run_id: int) -> None:
    """Decide and apply the next action for one run."""
    with task_bound(run_id=run_id):
        tasks.coordinate(run_id)


@app.task(name=TASK_RECONCILE)  # type: ignore[untyped-decorator]
def reconcile() -> None:
    """Re-send steps and runs whose messages may have been lost; count the repairs."""
    metrics.repaired(tasks.reconcile())


@app.task(name=TASK_EXPIRE_MEMORY)  # type: ignore[untyped-decorator]
def expire_memory() -> None:
    """Close the validity of facts whose time to live has passed."""
    tasks.expire_memory()


@app.task(name=TASK_ESCALATION_DEADLINES)  # type: ignore[untyped-decorator]
def escalation_deadlines() -> None:
    """Apply the configured action to escalations whose review deadline has passed."""
    tasks.apply_escalation_deadlines()


@app.task(name=TASK_FIRE_SCHEDULES)  # type: ignore[untyped-decorator]
def fire_schedules() -> None:
    """Submit the runs of the schedules whose due time has come, once per due time."""
    tasks.fire_schedules()


@app.task(name=TASK_PURGE_RUNS)  # type: ignore[untyped-decorator]
def purge_runs() -> None:
    """Delete the runs that ended more than `AGENTQ_RUN_RETENTION_DAYS` ago, with their rows."""
    tasks.purge_runs()


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_engine(**_: Any) -> None:
    die_with_parent(MAIN_PID)
    dispose_engines()
    tracing.setup(settings, service="scheduler")  # after the fork: the SDK's export thread


@task_prerun.connect  # type: ignore[untyped-decorator]
def _stack_limits(**_: Any) -> None:
    stack_limits.refresh()  # the dispatch cap is the stack's, whatever this machine's env says


@beat_embedded_init.connect  # type: ignore[untyped-decorator]
def _beat_dies_with_the_scheduler(**_: Any) -> None:
    die_with_parent(MAIN_PID)


@worker_init.connect  # type: ignore[untyped-decorator]
def _metrics(**_: Any) -> None:
    """In the main process, before the pool forks: every process writes its metrics under
    `AGENTQ_METRICS_DIR`, served on `AGENTQ_METRICS_PORT` if set
    (`models.operations.metrics_export`)."""
    metrics_export.record_in(metrics_export.metrics_dir(settings))
    metrics_export.serve(settings, database=True)


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _forget_metrics(pid: int | None = None, **_: Any) -> None:
    metrics_export.forget_process(pid or os.getpid(), metrics_export.metrics_dir(settings))
