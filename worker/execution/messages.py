"""What a delivered `agentq.execute_step` message claims (`worker.app.execute_step`).

A message names a step, but a fresh one is a wake-up (`worker.execution.wakeups`): its worker
takes the fair-next waiting item for the step its message now wakes for, `models.engine.handovers.
heir` (the named step while it is queued, else the step the message was handed over to). A
redelivered message, one carrying a held attempt and a recovery check name their step alone
(`claim`).
"""

from __future__ import annotations

from typing import Final

import structlog
from sqlmodel import Session

from models.db import retry_dropped, session_scope
from models.engine import fair_queue, handovers, leases, queue
from models.engine.queue import TASK_EXECUTE_STEP
from models.engine.runs import upstream_results
from models.errors import IllegalTransition, StepNotDue
from models.operations import metrics
from models.plans.references import has_reference
from models.settings import get_settings
from models.tables import utcnow
from worker.execution import wakeups
from worker.execution.attempts import Claimed
from worker.execution.claims import worker_name

log = structlog.get_logger("agentq.worker")

# A wake-up that finds its step taken between its read and its claim reads again this many times
# in all (the taker handed the message over, or another wake-up has the step).
WAKE_TRIES: Final = 3


@retry_dropped
def claim(step_id: int) -> Claimed | None:
    """Claim step `step_id`, sent through the broker, for this process; None when another
    delivery already has it (`models.engine.leases.claim`), or when the step is not due yet (a
    retry's backoff or a rate limit's retry-after, in `steps.queued_at`): then the message is sent
    again for the time left, so an early redelivery (kombu#337) never runs a step before its
    time."""
    return claim_woken(step_id, wake=False)[0]


@retry_dropped
def claim_woken(
    step_id: int, *, wake: bool = True, fair: bool = True, heirs_only: bool = False
) -> tuple[Claimed | None, fair_queue.Item | None]:
    """A fresh message's claim: nothing when the message wakes for no step (`handovers.heir`:
    spent); else the fair-next waiting step claimed, or the run phase to run in this task, in one
    transaction with the read; when the fair-next item is the step the message wakes for (or
    without `fair`), `claim`'s claim of that step; without `wake`, of step `step_id` itself.
    `heirs_only`, for a redelivered message whose own claim found nothing: only a step its
    message was handed over to."""
    due_in_s, own = 0.0, step_id  # the step the message wakes for (`handovers.heir`)
    with session_scope() as session:
        for _ in range(WAKE_TRIES if wake else 1):
            heir = handovers.heir(session, step_id) if wake else step_id
            if heir is None or (heirs_only and heir == step_id):
                log.info("execute_step.spent", step_id=step_id)
                return None, None
            if heir != step_id:
                log.info("execute_step.handed_over", step_id=heir, message=step_id)
            own = heir
            taken = (
                wakeups.take_next(session, own, message=step_id, now=utcnow())
                if wake and fair
                else None
            )
            if taken is not None:
                other = with_results(session, taken.step) if taken.step is not None else None
                break
            try:
                claimed = leases.claim(
                    session, own, worker=worker_name(), lease_s=get_settings().lease_s, now=utcnow()
                )
            except StepNotDue as early:  # delivered before its due time: sent for the time left
                due_in_s = early.due_in_s
                break
            except IllegalTransition as exc:  # taken since the read: whoever took it handed over
                log.info("execute_step.skipped", step_id=own, message=step_id, reason=str(exc))
                continue
            metrics.step_dispatched(session, claimed.step)
            return with_results(session, claimed), None
        else:
            return None, None
    if taken is not None:
        for task, args in taken.sends:  # a broker that is down: the reconciler re-sends
            queue.try_send(task, *args)
        return other, taken.phase
    log.info("execute_step.early", step_id=own, due_in_s=round(due_in_s, 3))
    queue.send(TASK_EXECUTE_STEP, own, countdown=due_in_s)
    return None, None


def with_results(
    session: Session, claimed: leases.Claim, after: dict[int, tuple[int, ...]] | None = None
) -> Claimed:
    """`claimed` with the results of the steps it waits for, read when it needs them (a model
    step, or arguments that refer to steps); `after`: the run's graph, when the caller has it."""
    step = claimed.step
    needed = step.kind == "model" or has_reference(step.args)
    results = upstream_results(session, step.run_id, step.id or 0, after=after) if needed else {}
    return Claimed(
        step,
        claimed.facts,
        results,
        claimed.tries,
        claimed.user_id,
        claimed.replan_check,
        claimed.deadline_at,
        claimed.approvals,
    )
