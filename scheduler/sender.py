"""The webhook sender's Celery app: `celery -A scheduler.sender worker -Q webhooks`.

It consumes the `webhooks` queue alone, where the scheduler's beat sends `agentq.deliver_webhooks`
every `AGENTQ_WEBHOOK_POLL_INTERVAL_S`; each task posts the due deliveries and records every
attempt (`scheduler.webhooks`). A process of its own because a receiver that hangs holds its
sender for up to `AGENTQ_WEBHOOK_TIMEOUT_S`: when the coordinator process sent webhooks, every
decision of every run waited behind that (another user's run took 16 s instead of 0.6 s). The
truth stays in Postgres: the outbox rows, claimed `FOR UPDATE SKIP LOCKED` with a lease, so
several pool processes and machines share the work, and a sender that is down delays only the
notifications (the beat's ticks expire unread; the rows wait).
"""

from __future__ import annotations

import os
from typing import Any, Final

from celery.signals import worker_process_init

from models.db import dispose_engines
from models.engine import tracing
from models.engine.queue import QUEUE_WEBHOOKS, TASK_DELIVER_WEBHOOKS, make_celery
from models.operations.logs import configure_logging
from models.orphans import die_with_parent
from models.settings import get_settings
from scheduler import webhooks

MAIN_PID: Final = os.getpid()  # `celery worker` imports this module before it forks
configure_logging()
settings = get_settings()
app = make_celery("agentq-sender", settings)
app.conf.task_default_queue = QUEUE_WEBHOOKS


@app.task(name=TASK_DELIVER_WEBHOOKS)  # type: ignore[untyped-decorator]
def deliver_webhooks() -> None:
    """Post the webhook deliveries that are due, and record each attempt."""
    webhooks.deliver_due()


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _fresh_engine(**_: Any) -> None:
    die_with_parent(MAIN_PID)
    dispose_engines()
    tracing.setup(settings, service="sender")  # after the fork: the SDK's export thread
