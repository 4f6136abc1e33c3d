"""A fresh `execute_step` message is a wake-up: its worker takes the fair-next waiting item.

The broker's FIFO order is not the order of work (`models.engine.fair_queue`): the worker that takes
a fresh message asks Postgres for the fair-next waiting item of any user and kind, and claims it
with its own guarded transition (a step: `models.engine.leases.claim`, taken back first if a lost
worker's lease expired; a phase: run in this task, claimed by its own code, `models.engine.phases`).
When that item is another step and the message's own step still waits, the own step is sent a
wake-up of its own after the commit, so every queued step keeps a message. A message whose step
is no longer queued (a worker that ended a step took it in fair order: `worker.execution.steps.
finish`) is spent, and ends after one read by key (`is_queued`). After a phase the message picks
again, at most
`PHASES_PER_WAKEUP` times, then claims its own step: a phase item whose claim keeps doing
nothing cannot hold the queue. A redelivered message, one carrying a held attempt
(`worker.execution.outages`) and a recovery check (`worker.execution.recovery`) are not wake-ups:
they name their step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import structlog
from sqlmodel import Session

from models import sql
from models.engine import fair_queue, leases, step_transitions
from models.engine.dispatch import Send
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import IllegalTransition
from models.operations import metrics
from models.settings import get_settings
from worker.execution.claims import worker_name

log = structlog.get_logger("agentq.worker")
PHASES_PER_WAKEUP = 3  # phases one message runs before it claims its own step
# step_status: step :step_id if it is queued.
STEP_STATUS: Final = "SELECT 1 FROM steps WHERE id = :step_id AND status = 'queued'"


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
        return _phase(item, own_step_id)
    wake: list[Send] = (
        [(TASK_EXECUTE_STEP, (own_step_id,))] if is_queued(session, own_step_id) else []
    )
    try:
        claimed, sends = _claim(session, item, now)
    except IllegalTransition:  # another worker took it since the read: claim the own step
        return None
    if claimed is None:
        return Taken(sends=sends + wake) if sends else None
    log.info("wakeup.step", step_id=item.step_id, user_id=item.user_id, for_step=own_step_id)
    return Taken(step=claimed, sends=sends + wake)


def take_in_chain(session: Session, *, now: datetime) -> Taken | None:
    """For a worker that ended a step and holds its run's lock (`worker.execution.steps.finish`):
    the fair-next item, whoever's, in the caller's transaction: a queued step claimed without
    waiting for a lock (`models.engine.leases.CLAIM_STEP_UNLOCKED`), or a phase to run. None when
    nothing waits, when the item is a lost worker's step (its recovery takes it back:
    `worker.execution.recovery`), or when another transaction holds it; its message wakes a worker
    for it then, as for every queued step."""
    item = fair_queue.next_item(session, now=now)
    if item is None:
        return None
    if item.step_id is None:
        return _phase(item, None)
    if item.status != "queued":
        return None
    try:
        claimed = leases.claim(
            session,
            item.step_id,
            worker=worker_name(),
            lease_s=get_settings().lease_s,
            now=now,
            skip_locked=True,
        )
    except IllegalTransition:
        return None
    metrics.step_dispatched(session, claimed.step)
    log.info("chain.step", step_id=item.step_id, user_id=item.user_id)
    return Taken(step=claimed)


def _phase(item: fair_queue.Item, for_step: int | None) -> Taken | None:
    """A run's phase to run in this task; None for a replan with nothing to answer."""
    if item.status == "replanning" and item.failed_step_id is None:
        return None  # nothing a replan could answer: the reconciler's to look at
    log.info("wakeup.phase", run_id=item.run_id, phase=item.status, for_step=for_step)
    return Taken(phase=item)


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


def is_queued(session: Session, step_id: int) -> bool:
    """Whether step `step_id` is `queued` (one read by its key): its message is still needed.
    A message whose step is not (a worker chained it, or it ended) is spent: every queued step
    has a message of its own (`models.engine.dispatch`; a lost one is the reconciler's), so it
    wakes nobody."""
    return sql.one(session, STEP_STATUS, {"step_id": step_id}) is not None
