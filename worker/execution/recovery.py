"""A step whose worker was lost is taken back as soon as its lease expires (issue 11, item 6).

When a pool process dies in the middle of a step (kill -9, out of memory, the hard time limit),
Celery requeues its message (`task_reject_on_worker_lost`) and the broker marks it redelivered.
That delivery finds the step still `running` under the dead attempt's lease (or, when the worker
had gone on to a later step of the run in the same task, that step), so its claim is refused;
instead of dropping it, the task sends itself again for the moment the lease expires
(`check_later`), and then takes the step back (`take_back`: the reconciler's own transition,
`models.engine.step_transitions.expire_lease`) and claims it. With heartbeats the lease is short, so
a killed worker's step runs again about a lease (`AGENTQ_LEASE_S`) after its last heartbeat,
without waiting for the reconciler's next pass; the reconciler still takes back what no
redelivery reached. A live attempt keeps renewing its lease, so the check finds it held and
does nothing: one follow-up per redelivery, never a loop.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

import structlog

from models.db import session_scope
from models.engine import queue, reconciliation, step_transitions
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import IllegalTransition
from models.tables import Step, utcnow

log = structlog.get_logger("agentq.worker")
MARGIN_S: Final = 0.5  # after the lease's end, so the check meets it expired


def check_later(step_id: int) -> bool:
    """Send `agentq.execute_step` again, marked `after_lost`, for when the lease of the running
    attempt the lost worker may have held ends: step `step_id`'s, or, when that step has ended,
    each running step of its run (the worker went on to run them in the same task, `worker.
    chains.Chain`, so the message that came back names the chain's first step). False when
    nothing is running: nothing sent."""
    with session_scope() as session:
        step = session.get(Step, step_id)
        if step is None:
            return False
        leases: list[tuple[int, datetime | None]] = [(step_id, step.lease_expires_at)]
        if step.status != "running":
            leases = [*reconciliation.running_leases(session, step.run_id)]
        now = utcnow()
        checks = [
            (held_id, max(0.0, (lease_end - now).total_seconds()))
            for held_id, lease_end in leases
            if lease_end is not None
        ]
    for held_id, left in checks:
        log.info("execute_step.lost_worker", step_id=held_id, check_in_s=round(left + MARGIN_S, 2))
        queue.send(TASK_EXECUTE_STEP, held_id, None, True, countdown=left + MARGIN_S)
    return bool(checks)


def take_back(step_id: int) -> bool:
    """Take step `step_id` back from an attempt whose lease expired: True when it is `queued`
    again (claim it); False when its attempt still holds it (it renewed its lease) or it is not
    running, and when its attempts are spent (it failed, and its run's coordinator is told)."""
    with session_scope() as session:
        try:
            step = step_transitions.expire_lease(session, step_id)
        except IllegalTransition:
            return False
        status, run_id = step.status, step.run_id
    if status == "failed":
        queue.try_send(TASK_COORDINATE, run_id)
        return False
    return True
