"""A fresh `execute_step` message is a wake-up: its worker takes the fair-next waiting item.

The broker's FIFO order is not the order of work (`models.engine.fair_queue`): the worker that takes
a fresh message asks Postgres for the fair-next waiting item of any user and kind, and claims it
with its own guarded transition (a step: `models.engine.leases.claim`, taken back first if a lost
worker's lease expired; a phase: run in this task, claimed by its own code, `models.engine.phases`).
A message wakes for its own step while that is queued, else for the step it was handed over to
(`models.engine.handovers.heir`); none left, it is spent. When the item taken is another queued
step, that step's message is handed over to the one this message woke for, which keeps a message
without a new one sent; a lost worker's step taken back had none, so the step woken for is sent a
message of its own. The worker that ends a step takes the fair-next item the same way
(`take_in_chain`). After a phase the message picks again, at most `PHASES_PER_WAKEUP` times, then
claims its own step: a phase item whose claim keeps doing nothing cannot hold the queue. A
redelivered message, one carrying a held attempt (`worker.execution.outages`) and a recovery check
(`worker.execution.recovery`) are not wake-ups: they name their step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import structlog
from sqlmodel import Session

from models.engine import fair_queue, handovers, leases, step_transitions
from models.engine.dispatch import Send
from models.engine.queue import TASK_COORDINATE, TASK_EXECUTE_STEP
from models.errors import IllegalTransition
from models.operations import metrics
from models.settings import get_settings
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


def take_next(session: Session, own_step_id: int, *, message: int, now: datetime) -> Taken | None:
    """In the caller's transaction: the fair-next item when it is not step `own_step_id` (the step
    the message of step `message` wakes for), taken (a step claimed; a phase only named: its
    task's claim takes it); None when it is that step, or nothing waits, or another worker took
    the item first (then claim the own step). A queued step taken hands its message over to the
    own step (`models.engine.handovers`); a lost worker's step taken back had none, so the own
    step is sent one of its own."""
    item = fair_queue.next_item(session, now=now)
    if item is None or item.step_id == own_step_id:
        return None
    if item.step_id is None:  # run here, then this message picks again (`worker.app._start`)
        return _phase(item, own_step_id)
    try:
        claimed, sends = _claim(session, item, now)
    except IllegalTransition:  # another worker took it since the read: claim the own step
        return None
    wake = _pass_on(session, item, own_step_id, message)
    if claimed is None:  # a lost worker spent its attempts: failed, its run's coordinate sent
        return Taken(sends=sends + wake)
    log.info("wakeup.step", step_id=item.step_id, user_id=item.user_id, for_step=own_step_id)
    return Taken(step=claimed, sends=sends + wake)


def _pass_on(session: Session, item: fair_queue.Item, own: int, message: int) -> list[Send]:
    """After a wake-up took `item` instead of step `own`, the step its message (of step
    `message`) wakes for: `own` takes over `item`'s message when `item` was queued (it had one),
    else it is sent a message of its own. When `own` was taken meanwhile (a chain handed the
    message on), the message's heir is read again (`handovers.heir`) and takes it over instead;
    nothing when no step waits on the message any more."""
    heir: int | None = own
    for _ in range(3):
        if heir is None:
            return []
        if item.status != "queued":
            return [(TASK_EXECUTE_STEP, (heir,))]
        if handovers.hand_over(session, taken=item.step_id or 0, heir=heir):
            return []
        heir = handovers.heir(session, message)
    return [(TASK_EXECUTE_STEP, (message,))]


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
