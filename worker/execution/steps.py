"""The execute-step task: claim the step, run its tool or model call, record the outcome.

The claim is a guarded transition (queued -> running) that takes a lease and the next attempt
number, so a message delivered twice runs the step once: the second delivery finds it running or
done and does nothing. The outcome is written only by the attempt that holds the step.

A rate-limited model call defers the step (back to queued, not counted as a failed attempt) and
the task is sent again with the server's `retry-after` as countdown, so no worker sleeps it out;
an exhausted quota or a spent token or cost budget fails the step and escalates the run. A
result that leaves one of the step's expectations unmet (`expect`) fails the step for good.

A step stops at its time limit, or its run's wall-time deadline if sooner
(`worker.execution.time_limits`).

Only the tools of `AGENTQ_TOOL_MODULES` and of the MCP servers of `AGENTQ_MCP_SERVERS` run
(`enabled_tool`; an MCP call's timeout is the step's time left). A step's resolved arguments and its
result are capped at `AGENTQ_STEP_DATA_MAX_BYTES`: over it, the step fails for good
(`StepDataTooLarge`; it would build the same data again); a result over its run's or user's
step data (`models.engine.storage`) is not stored, and the run escalates. An error that is not one
agentq raises on purpose is recorded as "failed with an internal error (<type>); see the worker
log": its text, which may hold host paths, goes to this worker's log only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Final

import structlog
from billiard.exceptions import SoftTimeLimitExceeded
from sqlmodel import Session

from models.approvals import calls as approval_calls
from models.approvals.calls import ApprovalRequired
from models.db import retry_dropped, session_scope
from models.engine import (
    decisions,
    escalation_rules,
    fair_queue,
    handovers,
    leases,
    step_transitions,
    storage,
)
from models.engine.coordinator import decide
from models.engine.dispatch import Send
from models.errors import (
    BudgetExhausted,
    ContextOverflow,
    DatabaseUnavailable,
    IllegalTransition,
    InvalidToolCalls,
    ProviderError,
    QuotaExhausted,
    RateLimited,
    RetryableToolError,
    ToolError,
)
from models.memory.erasures import lock_key
from models.operations import metrics
from models.plans.expectations import loaded, unmet
from models.plans.references import resolve
from models.plans.step_data import check_step_data, json_bytes
from models.plans.tools import ToolContext, enabled_tool
from models.settings import get_settings
from models.tables import Step, utcnow
from worker.execution import approval_gates, time_limits, wakeups
from worker.execution.attempts import Claimed, Outcome, retry_countdown_s
from worker.execution.child_steps import ChildRunNeeded, child_sends, start_child
from worker.execution.claims import worker_name
from worker.execution.messages import with_results
from worker.execution.step_turns import step_turn
from worker.execution.time_limits import StepTimeLimit, StepTimeLimitExceeded
from worker.execution.tool_use import model_step
from worker.phases import replan_checks

log = structlog.get_logger("agentq.worker")


# The step's status after an outcome that ends its attempt; every other one fails it.
STATUS_AFTER: Final = {
    "succeeded": "succeeded",
    "awaiting_approval": "waiting_approval",
    "awaiting_child": "waiting_child",
}
WAITS: Final = ("retry", "deferred", "awaiting_approval", "awaiting_child")  # charged in `finish`
# What a step's attempt may raise on purpose; anything else is a bug in a tool.
STEP_FAILURES = (ToolError, ProviderError, BudgetExhausted, SoftTimeLimitExceeded, ContextOverflow)


def perform(claimed: Claimed) -> Outcome:
    """Run the step's tool or model call; every failure becomes an `Outcome`, never a crash.
    Raises `DatabaseUnavailable` (a model step's budget or journal write met an outage), which
    is no failure of the step (`worker.execution.outages`)."""
    step, settings = claimed.step, get_settings()
    limit = StepTimeLimit.of(settings.step_time_limit_s, claimed.deadline_at, utcnow())
    try:
        with time_limits.enforced(limit):  # raises inside the step at its limit
            result = _run(claimed, deadline=time.monotonic() + limit.seconds)
        return checked_outcome(step, result)
    except ApprovalRequired as stopped:  # before a gated call: the step waits, no worker held
        return Outcome("awaiting_approval", stopped=stopped.row())
    except ChildRunNeeded as needed:  # kind `run`: the child is submitted with the step's end
        return Outcome("awaiting_child", child=needed.child)
    except STEP_FAILURES as exc:
        return failure_outcome(exc, step, max_deferrals=settings.model_max_deferrals)
    except DatabaseUnavailable:  # no failure of the step: its task waits out the outage
        raise
    except Exception as exc:  # a bug must fail its step, not the worker
        log.exception("execute_step.unexpected", step_id=step.id)
        return Outcome("failed", error=internal_error(step, exc))


def checked_outcome(step: Step, result: dict[str, Any]) -> Outcome:
    """What a step's `result` comes to (the rule alone: no effects, and no model call):
    succeeded, or failed when it leaves an expectation of the step unmet
    (`models.plans.expectations`), with an error naming each unmet one and the value seen. Not a
    retry: the same call would return the same result; the coordinator replans or escalates.
    Raises pydantic's `ValidationError` if `steps.expect` holds no expectations (a row written by
    hand), which `perform` records as an internal error."""
    reasons = unmet(loaded(step.expect), result)
    if not reasons:
        return Outcome("succeeded", result)
    return Outcome("failed", error=f"step {step.name!r}: unmet expectation: " + "; ".join(reasons))


def internal_error(step: Step, exc: BaseException) -> str:
    """What is recorded of an error agentq did not raise on purpose: the step and the error's
    type only (its text may hold host paths or other internals; the worker log has it all)."""
    return (
        f"step {step.name!r} failed with an internal error ({type(exc).__name__}); "
        "see the worker log"
    )


def failure_outcome(exc: BaseException, step: Step, *, max_deferrals: int) -> Outcome:
    """What a failed attempt of `step` comes to (the rule alone: no effects).

    - rate-limited, with fewer than `max_deferrals` deferrals: deferred by the `retry-after`;
    - quota exhausted, a token, cost or step-data budget spent (or the user's step data),
      tool calls still invalid after their re-asks: escalated with that reason (and the raw
      calls); the run state alone overflowing the context window: escalated
      `context_overflow`; the step stopped at its run's wall-time deadline (`worker.
      time_limits`): escalated `wall_time_budget_spent`;
    - a retryable tool error, a provider failure (a rate limit deferred too often included),
      the step's own time limit or the soft time limit: retry while `attempt - deferrals <
      max_attempts`, else failed;
    - any other tool error: failed.
    """
    error = _describe(exc)
    if isinstance(exc, RateLimited) and step.deferrals < max_deferrals:
        return Outcome("deferred", error=error, retry_after_s=exc.retry_after_s)
    if isinstance(exc, QuotaExhausted | BudgetExhausted | ContextOverflow):
        return Outcome("escalated", error=error, reason=exc.reason)
    if isinstance(exc, InvalidToolCalls):
        return Outcome("escalated", error=error, reason=exc.reason, raw=exc.raw)
    if isinstance(exc, StepTimeLimitExceeded) and exc.reason:  # the run's wall time is spent
        return Outcome("escalated", error=error, reason=exc.reason)
    if isinstance(exc, RetryableToolError | SoftTimeLimitExceeded | ProviderError):
        retryable = step_transitions.failed_attempts(step) < step.max_attempts
        return Outcome("retry" if retryable else "failed", error=error)
    return Outcome("failed", error=error)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, StepTimeLimitExceeded):
        return str(exc)
    if isinstance(exc, SoftTimeLimitExceeded):
        return "step exceeded its soft time limit"
    return str(exc) or type(exc).__name__


def _run(claimed: Claimed, *, deadline: float) -> dict[str, Any]:
    """The step's result; `deadline` (`time.monotonic()`'s clock) is when its time limit
    passes, which its tools may read (`ToolContext.time_left_s`: an MCP call's timeout)."""
    step = claimed.step
    ctx = ToolContext(
        run_id=step.run_id,
        step_id=step.id or 0,
        step_name=step.name,
        attempt=step.attempt,
        tries_of_name=claimed.tries,
        facts=claimed.facts,
        deadline=deadline,
    )
    max_bytes = get_settings().step_data_max_bytes
    if step.kind == "run":  # its child is submitted with the step's end
        given = step.args.get("facts", {})
        raise ChildRunNeeded(resolve(given, results=claimed.results, facts=claimed.facts))
    if step.kind == "model":
        result = model_step(step, claimed.results, ctx, claimed.approvals)
        check_step_data(result, what=f"the result of step {step.name!r}", max_bytes=max_bytes)
        return result
    tool = enabled_tool(step.tool or "")
    args = resolve(step.args, results=claimed.results, facts=claimed.facts, max_bytes=max_bytes)
    return approval_gates.tool_step_call(ctx, tool, args, claimed.approvals)


@dataclass(frozen=True)
class Finished:
    """What is left after a step's outcome was committed: the step to run next in this process
    (`next`), whether to synthesize the run here (`synthesize`), another run's phase to run here
    (`phase`, taken in fair order), messages to send (`sends`), and for a retry or a deferral the
    countdown after which the step is sent again (`again_in_s`)."""

    next: Claimed | None = None
    synthesize: bool = False
    sends: list[Send] = field(default_factory=list)
    again_in_s: float | None = None
    phase: fair_queue.Item | None = None


@retry_dropped
def finish(claimed: Claimed, outcome: Outcome, *, may_chain: bool) -> Finished:
    """Record `outcome` for the attempt that holds the step and advance its run, in one
    transaction under the run's lock (`models.engine.decisions`): the coordinator's decision is
    applied here, and with `may_chain` this process takes the next item in fair order itself, in
    the same transaction (DESIGN.md, invariant 13): its run's next step when no other user is owed
    a turn first (`Locked.others_waiting`, `models.engine.fair_queue`), else the fair-next waiting
    item, whoever's (`worker.execution.wakeups.take_in_chain`: a step, or a phase to run here).
    A retry or a deferral only puts the step back in the queue. A lost lease (another attempt holds
    the step) changes nothing."""
    step, settings = claimed.step, get_settings()
    turn = step_turn(step, outcome, settings)
    used_s = (utcnow() - step.started_at).total_seconds() if step.started_at else 0.0
    with session_scope() as session:
        erasure_key = lock_key(claimed.user_id) if turn is not None else None
        locked = decisions.lock(session, step.run_id, erasure_key=erasure_key, used_s=used_s)
        if locked is None:
            return Finished()
        try:
            outcome = _record(session, step, outcome, turn, claimed.user_id)
        except IllegalTransition as exc:
            log.warning("execute_step.lost_lease", step_id=step.id, reason=str(exc))
            return Finished()
        metrics.step_ended(
            session, step.kind, step.tool, outcome.kind, started_at=step.started_at, now=utcnow()
        )
        if outcome.kind in WAITS:  # an end charges in `_record`
            fair_queue.charge(session, claimed.user_id, used_s)
        if outcome.kind == "retry":
            return Finished(again_in_s=retry_countdown_s(step.attempt))
        if outcome.kind == "deferred":  # the worker is free now; the step is due after the wait
            return Finished(again_in_s=outcome.retry_after_s)
        locked.set_status(step.id or 0, _status_after(outcome))
        replan_checks.note(session, locked, step, outcome)
        if outcome.kind == "escalated":
            _escalate(session, locked, step, outcome)
        claim_next = _claim_next if may_chain and not locked.others_waiting else None
        applied = decisions.apply(
            session,
            locked,
            decide(locked.view()),
            cap=settings.user_max_running_steps,
            claim_next=claim_next,
        )
        next_step = applied.claimed and with_results(session, applied.claimed, locked.after())
        fair = (
            wakeups.take_in_chain(session, now=utcnow())
            if claim_next is None and may_chain
            else None
        )
        sends = [*applied.sends, *child_sends(outcome)]
        if fair is not None and fair.step is not None:
            next_step = with_results(session, fair.step)
            taken = fair.step.step.id or 0  # queued: its message is out, handed over here
            sends = handovers.handed_in_chain(session, sends, taken=taken)
    phase = fair.phase if fair is not None else None
    return Finished(next_step or None, applied.synthesize, sends, phase=phase)


def _status_after(outcome: Outcome) -> str:
    """The step's status once `outcome` is recorded (a retry and a deferral aside)."""
    return STATUS_AFTER.get(outcome.kind, "failed")


def _claim_next(session: Session, step_id: int) -> leases.Claim:
    return leases.claim(
        session,
        step_id,
        worker=worker_name(),
        lease_s=get_settings().lease_s,
        now=utcnow(),
        expected="pending",
    )


def _record(
    session: Session, step: Step, outcome: Outcome, turn: leases.Turn | None, user_id: str
) -> Outcome:
    """Write `outcome` for the attempt that holds `step`, and return what was written: a result
    that does not fit the run's step-data budget or its user's total (`models.engine.storage`) is
    not stored, and the step is escalated for it instead. Raises `IllegalTransition` if another
    attempt holds the step (its lease expired and it was claimed again)."""
    step_id, attempt, now = step.id or 0, step.attempt, utcnow()
    if outcome.kind == "retry":
        step_transitions.retry_step(
            session,
            step_id,
            attempt=attempt,
            error=outcome.error,
            backoff_s=retry_countdown_s(attempt),
        )
    elif outcome.kind == "deferred":
        step_transitions.defer_step(
            session,
            step_id,
            attempt=attempt,
            retry_after_s=outcome.retry_after_s,
            error=outcome.error,
        )
    elif outcome.kind == "succeeded":
        return _succeed(session, step, outcome, turn, user_id)
    elif outcome.kind == "awaiting_child" and outcome.child is not None:
        return start_child(session, step, outcome)
    elif outcome.kind == "awaiting_approval" and outcome.stopped is not None:
        approval_calls.stop(session, step.run_id, step_id, outcome.stopped)
        step_transitions.await_approval(
            session, step_id, attempt=attempt, why=str(outcome.stopped["why"])
        )
    else:
        leases.end_attempt(
            session, step, to="failed", now=now, error=outcome.error, turn=turn, user_id=user_id
        )
    return outcome


def _succeed(
    session: Session, step: Step, outcome: Outcome, turn: leases.Turn | None, user_id: str
) -> Outcome:
    """End the attempt with its result, charged to the run's step-data budget and its user's
    total (`models.engine.storage`); a result that does not fit is not stored, and the step is
    escalated for it instead (DESIGN.md, invariant 4: the run's state is kept)."""
    result = outcome.result or {}
    what = f"the result of step {step.name!r}"
    charge = storage.Charge(what, json_bytes(result), get_settings().user_step_data_max_bytes)
    try:
        leases.end_attempt(
            session,
            step,
            to="succeeded",
            now=utcnow(),
            result=result,
            turn=turn,
            user_id=user_id,
            charge=charge,
        )
    except BudgetExhausted as refused:  # nothing was stored: the run escalates for it
        spent = failure_outcome(refused, step, max_deferrals=0)
        return _record(session, step, spent, step_turn(step, spent, get_settings()), user_id)
    return outcome


def _escalate(session: Session, locked: decisions.Locked, step: Step, outcome: Outcome) -> None:
    """Report the escalated `outcome` (`models.engine.escalation_rules`): the run waits for a
    reviewer; a run no longer running (cancelled) is left as it is."""
    report = escalation_rules.StepEscalated(
        step.id, step.name, step.tool or "", outcome.error, outcome.reason, outcome.raw
    )
    if escalation_rules.escalate(session, step.run_id, report, found=locked.status):
        locked.status = "waiting_review"
    else:
        log.info("execute_step.not_escalated", step_id=step.id, status=locked.status)
