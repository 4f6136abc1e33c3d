"""The synthesize task: the run's final answer, from the results of its steps."""

from __future__ import annotations

import structlog

from models import dispatch, goal_checks, phases, transitions
from models.db import session_scope
from models.dispatch import Send
from models.errors import (
    BudgetExhausted,
    ContextTooLong,
    GoalNotMet,
    ProviderError,
    QuotaExhausted,
    RateLimited,
)
from models.plans import current_steps
from models.queue import TASK_REMEMBER_RUN
from models.runs import results_by_name
from models.settings import get_settings
from models.step_data import fit_outputs, json_bytes
from models.tables import Step
from worker import calls
from worker.claims import claim_phase_in, renewed
from worker.context import ContextOverflow
from worker.prompts import Prompt, synthesize_prompt
from worker.providers import Completion
from worker.refits import Fitted
from worker.working_memory import request_for, request_in

log = structlog.get_logger("agentq.worker")
# What escalates a synthesis (a rate limit, a `ProviderError` too, defers it instead).
ESCALATING = (ProviderError, BudgetExhausted, ContextOverflow)
SYNTHESIZING = ("synthesizing",)


def synthesize(run_id: int) -> list[Send]:
    """Write the final answer of a `synthesizing` run and mark it succeeded; returns the
    messages to send now that it has committed (empty when the run was not synthesizing).

    `final_result` is `{"answer": str, "offline": bool, "outputs": {step name: result}}`; the
    outputs are the rows' results verbatim, so what was submitted never depends on the model's
    wording; outputs that would take the final result over `AGENTQ_STEP_DATA_MAX_BYTES` are
    replaced by their sizes, largest first (`models.step_data.fit_outputs`). The run is marked
    succeeded as soon as its answer is written; after that commit `agentq.remember_run` is sent
    to the `memory` queue, which writes its episode and facts off the hot path
    (`worker.memory.remember_ended_run`; a broker that is down loses that message, logged as
    `synthesize.unsent` by the sender, and the reconciler asks for it again later). The
    transaction that ends the synthesis (succeeded, or escalated) also dispatches the run's user,
    whose slot the synthesis held (`models.dispatch`). A run whose deliverables disagree with its
    pinned facts escalates `goal_not_met` before any call (`models.goal_checks`, detail
    `missing`: one line per conflict); a spent token or cost budget, an exhausted quota or a
    provider failure escalates the run instead of succeeding (reason `token_budget_spent`,
    `cost_budget_spent`, `quota_exhausted`, `synthesis_failed`), as does a context that
    overflows (`context_overflow`: ours, or the server's window after one smaller rebuild,
    `worker.refits`); a rate limit is raised as `RateLimited` for the task to send itself again
    later.

    A second delivery of the task while this one holds the run's phase does nothing (`models.
    phases`), so the model is called once per synthesis; an attempt whose phase was taken over
    (its lease expired: its worker stopped renewing it) writes nothing but the call's charge.
    Two transactions when the context needs no summary folded: one claims the phase, reads the
    run and reserves the call's budget (`_start`), one settles it, ends the phase, writes the
    answer and dispatches; that one waits out a database outage (`worker.calls.waits_out_outages`),
    the answer being paid for. Raises `PhaseNotDue` when a deferred synthesis is not due yet.
    """
    cap = get_settings().user_max_running_steps
    started = _start(run_id)
    if started is None:
        return []
    claimed, call, steps = started
    if isinstance(call, Exception):
        return _escalate(run_id, claimed, call, cap=cap)
    try:
        with renewed(claimed):
            call, completion, attempt = _answered(call, synthesize_prompt(claimed.run.goal, steps))
    except RateLimited:
        raise
    except ESCALATING as exc:
        return _escalate(run_id, claimed, exc, cap=cap)
    room = get_settings().step_data_max_bytes - json_bytes(completion.text)
    final = {
        "answer": completion.text,
        "offline": completion.offline,
        "outputs": fit_outputs(results_by_name(steps), max_bytes=room),
    }

    @calls.waits_out_outages
    def finish() -> list[Send]:
        with session_scope() as session:
            calls.settle(session, call, completion, attempt)  # the call was made: it is charged
            if not phases.end(session, run_id, claimed.attempt, statuses=SYNTHESIZING):
                log.info("synthesize.skipped", run_id=run_id, reason="the phase was taken over")
                return []
            transitions.succeed_run(session, run_id, final_result=final)
            user_id = claimed.run.user_id
            return [(TASK_REMEMBER_RUN, (run_id,)), *dispatch.dispatch(session, user_id, cap=cap)]

    return finish()


def _answered(call: calls.Call, prompt: Prompt) -> tuple[calls.Call, Completion, int]:
    """Send the reserved `call` (no transaction open): the call that was answered, its answer
    and attempt. Refused as too long, the request is rebuilt smaller from `prompt`
    (`worker.refits`), reserved again and sent; raises `ContextOverflow` when that is refused
    too, and what `calls.send` and `calls.reserve` raise."""
    fitted = Fitted(call.run_id, prompt, call.request)
    while True:
        try:
            completion, attempt = calls.send(call)
        except ContextTooLong as refused:  # released, recorded: nothing to settle
            fitted.refit(refused)
        else:
            return call, completion, attempt
        with session_scope() as session:
            call = calls.reserve(session, call.run_id, fitted.request)


def _start(run_id: int) -> tuple[phases.Claimed, calls.Call | Exception, list[Step]] | None:
    """Claim the run's synthesis (`models.phases`), check what its steps delivered against its
    pinned facts (`models.goal_checks`: a conflict comes back as `GoalNotMet` in the call's
    place, and no answer is asked for), build its request and reserve its budget,
    in one transaction when the context needs no summary folded first (else the fold's calls
    come between); None when another delivery holds the phase or the run is not synthesizing.
    A failure that escalates (`ESCALATING`: the budget spent, the context overflowing, the
    fold's call failing) comes back in the call's place, with the claim kept for the escalation
    to end. Raises `PhaseNotDue`, and `RateLimited` from the fold's calls."""
    with session_scope() as session:
        claimed = claim_phase_in(session, run_id, SYNTHESIZING)
        if claimed is None:
            return None
        run = claimed.run
        steps = current_steps(session, run)
        conflicts = goal_checks.conflicts_of(session, run, steps)
        if conflicts:  # no answer to pay for: what it delivered fails the goal already
            missing = [c.describe() for c in conflicts]
            return claimed, GoalNotMet("; ".join(missing), missing=missing), steps
        prompt = synthesize_prompt(run.goal, steps)
        try:
            request = request_in(session, run, prompt, steps=steps)
            if request is not None:
                return claimed, calls.reserve(session, run_id, request), steps
        except ESCALATING as exc:  # no model call here; nothing written but the claim, kept
            return claimed, exc, steps
    try:
        with renewed(claimed):  # the fold's model calls
            request = request_for(run_id, prompt)
        with session_scope() as session:
            return claimed, calls.reserve(session, run_id, request), steps
    except RateLimited:
        raise
    except ESCALATING as exc:
        return claimed, exc, steps


def _escalate(run_id: int, claimed: phases.Claimed, exc: Exception, *, cap: int) -> list[Send]:
    """End the synthesis `claimed` holds by escalating the run for `exc` (one transaction);
    returns what the dispatch of its user released, nothing when the phase was taken over."""
    with session_scope() as session:
        if not phases.end(session, run_id, claimed.attempt, statuses=SYNTHESIZING):
            return []  # another delivery took the phase over: it escalates, or not
        transitions.escalate(
            session,
            run_id,
            expected="synthesizing",
            reason=_escalation_reason(exc),
            detail={
                "error": str(exc),
                **({"missing": exc.missing} if isinstance(exc, GoalNotMet) else {}),
            },
        )
        return dispatch.dispatch(session, claimed.run.user_id, cap=cap)


def _escalation_reason(exc: Exception) -> str:
    if isinstance(exc, BudgetExhausted | QuotaExhausted | GoalNotMet):
        return exc.reason
    return "context_overflow" if isinstance(exc, ContextOverflow) else "synthesis_failed"
