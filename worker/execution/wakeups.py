"""A fresh `execute_step` message is a wake-up: its worker takes the fair-next waiting item.

The broker's FIFO order is not the order of work (`models.engine.fair_queue`): the worker that takes
a fresh message asks Postgres for the fair-next waiting item of any user and kind, and claims it
with its own guarded transition (a step: `models.engine.leases.claim`, taken back first if a lost
worker's lease expired; a phase: run in this task, claimed by its own code, `models.engine.phases`).
When that item is another step and the message's own step still waits, the own step is sent a
wake-up of its own after the commit, so every waiting item keeps a message; a message left over
later finds nothing, or the next item. After a phase the message picks again, at most
`PHASES_PER_WAKEUP` times, then claims its own step: a phase item whose claim keeps doing
nothing cannot hold the queue. A redelivered message, one carrying a held attempt
(`worker.execution.outages`) and a recovery check (`worker.execution.recovery`) are not wake-ups:
they name their step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog
from sqlmodel import Session

from models.engine import fair_queue, leases, step_transitions
from models.engine.dispatch import Send
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import IllegalTransition
from models.operations import metrics
from models.settings import get_settings
from models.tables import Step
from worker.execution.claims import worker_name

log = structlog.get_logger("agentq.worker")
PHASES_PER_WAKEUP = 3  # phases one message runs before it claims its own step


@dataclass(frozen=True)
class Taken:
    """What a wake-up took instead of its own step: a claimed step (`step`), or a run's phase to
    run in this task (`phase`); `sends` go out after the commit (the own step's wake-up, a
    coordinate for a step whose attempts a lost worker spent)."""

    step: leases.Claim | None = None
    phase: fair_queue.Item | None = None
    sends: list[Send] = field(default_factory=list)


def take_next(session: Session, own_step_id: int, *, now: datetime) -> Taken | None:
    """In the caller's transaction: the fair-next item when it is not step `own_step_id`, taken
    (a step claimed; a phase only named: its task's claim takes it); None when it is that step,
    or nothing waits, or another worker took the item first (then claim the own step)."""
    item = fair_queue.next_item(session, now=now)
    if item is None or item.step_id == own_step_id:
        return None
    if item.step_id is None:  # run here, then this message picks again (`worker.app._start`)
        if item.status == "replanning" and item.failed_step_id is None:
            return None  # nothing a replan could answer: the reconciler's to look at
        log.info("wakeup.phase", run_id=item.run_id, phase=item.status, for_step=own_step_id)
        return Taken(phase=item)
    wake: list[Send] = [(TASK_EXECUTE_STEP, (own_step_id,))] if _waits(session, own_step_id) else []
    try:
        claimed, sends = _claim(session, item, now)
    except IllegalTransition:  # another worker took it since the read: claim the own step
        return None
    if claimed is None:
        return Taken(sends=sends + wake) if sends else None
    log.info("wakeup.step", step_id=item.step_id, user_id=item.user_id, for_step=own_step_id)
    return Taken(step=claimed, sends=sends + wake)


def _claim(
    session: Session, item: fair_queue.Item, now: datetime
) -> tuple[leases.Claim | None, list[Send]]:
    """Claim the waiting step `item`, taking it back first from a lost worker whose lease
    expired (`models.engine.step_transitions.expire_lease`); a step whose attempts that loss spent
    is failed instead (None, with its run's coordinate to send)."""
    step_id = item.step_id or 0
    if item.status == "running":
        expired = step_transitions.expire_lease(session, step_id)
        if expired.status == "failed":
            return None, [(TASK_COORDINATE, (expired.run_id,))]
        log.info("wakeup.taken_back", step_id=step_id, attempt=expired.attempt)
    claimed = leases.claim(
        session, step_id, worker=worker_name(), lease_s=get_settings().lease_s, now=now
    )
    metrics.step_dispatched(session, claimed.step)
    return claimed, []


def _waits(session: Session, step_id: int) -> bool:
    """Whether step `step_id` is still queued (its message's wake-up is needed)."""
    step = session.get(Step, step_id)
    return step is not None and step.status == "queued"
