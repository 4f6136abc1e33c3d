"""Rate-limited plan, replan and synthesis tasks: wait outside the worker, a bounded number of
times.

A step defers itself (`worker.execution.steps`); a run phase's task (planning, replanning,
synthesizing) cannot go back to a queue of its own, so the run stays in its phase and the task is
sent again with the server's `retry-after` as countdown. After `AGENTQ_MODEL_MAX_DEFERRALS`
deferrals of one phase the run escalates (`rate_limited`) instead of waiting for ever (DESIGN.md,
invariant 4).
"""

from __future__ import annotations

import structlog

from models.db import session_scope
from models.engine import escalation_rules, run_transitions
from models.errors import IllegalTransition, RateLimited
from models.settings import get_settings

log = structlog.get_logger("agentq.worker")


def defer_phase(run_id: int, *, phase: str, exc: RateLimited) -> bool:
    """Record that run `run_id`'s `phase` task waits `exc.retry_after_s`; True when the caller
    should send the task again with that countdown.

    False when the run has left the phase (nothing changes), or when the phase has been deferred
    `AGENTQ_MODEL_MAX_DEFERRALS` times (the run escalates `rate_limited` with the error).
    """
    with session_scope() as session:
        try:
            run_transitions.defer_run(
                session,
                run_id,
                phase=phase,
                retry_after_s=exc.retry_after_s,
                max_deferrals=get_settings().model_max_deferrals,
                error=str(exc)[:1000],
            )
            return True
        except IllegalTransition as refused:
            if refused.found != phase:
                log.info("defer.skipped", run_id=run_id, phase=phase, reason=str(refused))
                return False
        deferred = escalation_rules.DeferredTooOften(phase, error=str(exc))
        escalation_rules.escalate(session, run_id, deferred)
    return False
