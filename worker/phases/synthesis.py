"""The synthesize task: the run's final answer, from the results of its steps."""

from __future__ import annotations

from typing import Any

import structlog

from models.db import session_scope
from models.engine import (
    decisions,
    dispatch,
    effects,
    escalation_rules,
    goal_checks,
    phases,
    repeats,
    run_transitions,
)
from models.engine.coordinator import GoalVerdict, decide_unmet
from models.engine.dispatch import Send
from models.engine.escalation_rules import Reported, SynthesisFailed
from models.engine.goal_checks import Checks
from models.engine.queue import TASK_REMEMBER_RUN, wake_parent
from models.engine.runs import results_by_name
from models.errors import (
    BudgetExhausted,
    ContextOverflow,
    ContextTooLong,
    ProviderError,
    RateLimited,
)
from models.plans.plans import current_steps
from models.plans.step_data import fit_outputs, json_bytes
from models.settings import get_settings
from models.tables import Step
from worker.execution.claims import claim_phase_in, renewed
from worker.memory.working_memory import RunRead, request_for, request_in
from worker.model_calls import calls
from worker.model_calls.prompts import Prompt, synthesize_prompt
from worker.model_calls.providers import Completion
from worker.model_calls.refits import Fitted
from worker.model_calls.structured import unanswered
from worker.phases import goal_check

log = structlog.get_logger("agentq.worker")
# What escalates a synthesis (a rate limit, a `ProviderError` too, defers it instead).
ESCALATING = (ProviderError, BudgetExhausted, ContextOverflow)
SYNTHESIZING = ("synthesizing",)


def synthesize(run_id: int) -> list[Send]:
    """Write the final answer of a `synthesizing` run, check its goal, and mark it succeeded;
    returns the messages to send now that it has committed (empty when the run was not
    synthesizing).

    `final_result` is `{"answer": str, "offline": bool, "outputs": {step name: result}}`; the
    outputs are the rows' results verbatim, so what was submitted never depends on the model's
    wording; outputs that would take the final result over `AGENTQ_STEP_DATA_MAX_BYTES` are
    replaced by their sizes, largest first (`models.plans.step_data.fit_outputs`). After the commit
    that marks the run succeeded, `agentq.remember_run` is sent to the `memory` queue, which
    writes its episode and facts off the hot path (`worker.memory.remembering.remember_ended_run`; a
    broker that is down loses that message, logged as `synthesize.unsent` by the sender, and the
    reconciler asks for it again later). The transaction that ends the synthesis (succeeded,
    replanned, or escalated) also dispatches the run's user, whose slot the synthesis held
    (`models.engine.dispatch`).

    The goal check (issue 12, item 1; `models.engine.goal_checks`): a run whose deliverables
    disagree with its pinned facts, or miss a value its criteria name, is not met before any call
    (`Checks.rules_verdict`, for every provider); a run with success criteria has its
    answer judged by a second call (`worker.phases.goal_check`), the answer written first
    (`models.engine.phases.keep_answer`) so that a later delivery of this synthesis checks it again
    instead of paying for another. A goal not met is replanned in the place of the deliverable,
    or escalated `goal_not_met` (`models.engine.coordinator.decide_unmet`); every verdict is
    recorded (`goal.checked`), a run with pinned facts and no criteria's too (`Checks.agreed`).
    A spent token or cost budget, an exhausted quota or a provider failure escalates the run
    instead of succeeding (`models.engine.escalation_rules` decides: reason
    `token_budget_spent`, `cost_budget_spent`,
    `quota_exhausted`, `synthesis_failed`; a check that never validates, `invalid_goal_check`),
    as does a context that overflows (`context_overflow`: ours, or the server's window after
    one smaller rebuild, `worker.model_calls.refits`); a rate limit is raised as `RateLimited` for
    the task to send itself again later.

    A second delivery of the task while this one holds the run's phase does nothing (`models.
    phases`), so the model is called once per synthesis; an attempt whose phase was taken over
    (its lease expired: its worker stopped renewing it) writes nothing but the call's charge.
    Without criteria, two transactions when the context needs no summary folded: one claims the
    phase, reads the run and reserves the call's budget (`_start`), one settles it, ends the
    phase, writes the answer and dispatches; the writes after a paid answer wait out a database
    outage (`worker.model_calls.calls.waits_out_outages`). Raises `PhaseNotDue` when a deferred
    synthesis is not due yet.
    """
    cap = get_settings().user_max_running_steps
    started = _start(run_id)
    if started is None:
        return []
    claimed, first, steps, checks = started
    if isinstance(first, GoalVerdict):
        return _unmet(run_id, claimed, first, cap=cap)
    if isinstance(first, Exception):
        return _escalate(run_id, claimed, SynthesisFailed(first), cap)
    if isinstance(first, calls.Call):
        try:
            with renewed(claimed):
                answered = _answered(first, synthesize_prompt(claimed.run.goal, steps))
        except RateLimited:
            raise
        except ESCALATING as exc:
            return _escalate(run_id, claimed, SynthesisFailed(exc), cap)
        final = _final(answered[1], steps)
        if not checks.criteria:
            return _finish(run_id, claimed, final, answered, cap=cap, verdict=checks.agreed())
        if not _keep(run_id, claimed, final, answered):
            return []
    else:
        final = first
    try:
        with renewed(claimed):
            verdict = goal_check.judge(
                run_id, claimed.run.goal, checks.criteria, checks.deliverables, final["answer"]
            )
    except RateLimited:
        raise
    except goal_check.Unjudged as exc:
        unjudged = unanswered(exc.answer, "synthesizing", "goal_check")
        return _escalate(run_id, claimed, unjudged, cap)
    if verdict is not None and not verdict.met:
        return _unmet(run_id, claimed, verdict, cap=cap)
    return _finish(run_id, claimed, final, None, cap=cap, verdict=verdict)


def _final(completion: Completion, steps: list[Step]) -> dict[str, Any]:
    room = get_settings().step_data_max_bytes - json_bytes(completion.text)
    return {
        "answer": completion.text,
        "offline": completion.offline,
        "outputs": fit_outputs(results_by_name(steps), max_bytes=room),
    }


Answered = tuple[calls.Call, Completion, int]


@calls.waits_out_outages
def _keep(run_id: int, claimed: phases.Claimed, final: dict[str, Any], answered: Answered) -> bool:
    """Settle the answer's call and write the answer, the phase still held, before its goal
    check (one transaction); False when the phase was taken over (only the charge written)."""
    with session_scope() as session:
        calls.settle(session, *answered)  # the call was made: it is charged
        if phases.keep_answer(session, run_id, claimed.attempt, final=final):
            return True
    log.info("synthesize.skipped", run_id=run_id, reason="the phase was taken over")
    return False


@calls.waits_out_outages
def _finish(
    run_id: int,
    claimed: phases.Claimed,
    final: dict[str, Any],
    answered: Answered | None,
    *,
    cap: int,
    verdict: GoalVerdict | None = None,
) -> list[Send]:
    """Settle the answer's call (when not settled yet: `answered`), end the phase, record the
    goal check's `verdict` (met) and mark the run succeeded with `final` (one transaction)."""
    with session_scope() as session:
        if answered is not None:
            calls.settle(session, *answered)  # the call was made: it is charged
        if not phases.end(
            session, run_id, claimed.attempt, statuses=SYNTHESIZING, used_s=claimed.held_s()
        ):
            log.info("synthesize.skipped", run_id=run_id, reason="the phase was taken over")
            return []
        if verdict is not None:
            goal_checks.record(session, claimed.run, verdict)
        run_transitions.succeed_run(session, run_id, final_result=final)
        user_id = claimed.run.user_id
        return [
            (TASK_REMEMBER_RUN, (run_id,)),
            *wake_parent(session, run_id),  # a child run's parent goes on
            *dispatch.dispatch(session, user_id, cap=cap),
        ]


@calls.waits_out_outages
def _unmet(run_id: int, claimed: phases.Claimed, verdict: GoalVerdict, *, cap: int) -> list[Send]:
    """End the synthesis with a goal not met (one transaction): record `verdict`, then replan
    or escalate as the coordinator decides (`models.engine.coordinator.decide_unmet`: at once when
    the deliverable made an effect a replan would make again, `models.engine.effects`, or an
    earlier run of the same request replanned in vain, `models.engine.repeats`) and
    send what that leaves; nothing when the phase was taken over. The deliverable's effect is
    found before the transaction (`effects.effect_of` may ask an MCP server), only while a replan
    is left (the claimed run's replans do not change while it synthesizes)."""
    run = claimed.run
    replan_left = run.replans_used < run.replans_limit
    effect = effects.effect_of(verdict.step_id) if replan_left else None
    with session_scope() as session:
        held = phases.keep_answer(session, run_id, claimed.attempt, final=None)  # not delivered
        if not held or not phases.end(
            session, run_id, claimed.attempt, statuses=SYNTHESIZING, used_s=claimed.held_s()
        ):
            return []
        goal_checks.record(session, claimed.run, verdict)
        locked = decisions.lock(session, run_id)
        if locked is None:
            return []
        if locked.replans_used < locked.replans_limit:  # only a replan to skip
            locked.effect_made = effect
            if get_settings().skip_futile_replans and effect is None:
                locked.unmet_before = repeats.unmet_before(session, run_id)
        decision = decide_unmet(locked.view(), verdict)
        log.info("synthesize.goal_not_met", run_id=run_id, action=decision.action)
        return decisions.apply(session, locked, decision, cap=cap).sends


def _answered(call: calls.Call, prompt: Prompt) -> tuple[calls.Call, Completion, int]:
    """Send the reserved `call` (no transaction open): the call that was answered, its answer
    and attempt. Refused as too long, the request is rebuilt smaller from `prompt`
    (`worker.model_calls.refits`), reserved again and sent; raises `ContextOverflow` when that is
    refused too, and what `calls.send` and `calls.reserve` raise."""
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


Started = tuple[
    phases.Claimed, calls.Call | dict[str, Any] | GoalVerdict | Exception, list[Step], Checks
]


def _start(run_id: int) -> Started | None:
    """Claim the run's synthesis (`models.engine.phases`), read what to check of its outcome
    (`models.engine.goal_checks.checks_of`), build its request and reserve its budget, in one
    transaction when the context needs no summary folded first (else the fold's calls come
    between); None when another delivery holds the phase or the run is not synthesizing.
    In the call's place come: the answer an earlier delivery of this synthesis wrote (its
    `final_result`: only the check is left); a `GoalVerdict` when the deliverables conflict
    with the pinned facts or miss a value the criteria name (`Checks.rules_verdict`: no answer
    is asked for); a failure that escalates (`ESCALATING`: the
    budget spent, the context overflowing, the fold's call failing), with the claim kept for
    the escalation to end. Raises `PhaseNotDue`, and `RateLimited` from the fold's calls."""
    with session_scope() as session:
        claimed = claim_phase_in(session, run_id, SYNTHESIZING)
        if claimed is None:
            return None
        run = claimed.run
        steps = current_steps(session, run)
        read = RunRead.of(session, run, steps)  # the pinned facts, read once for both
        checks = goal_checks.checks_of(session, run, steps, read.facts)
        if (verdict := checks.rules_verdict()) is not None:
            return claimed, verdict, steps, checks  # no answer to pay for: it fails already
        if run.final_result is not None:
            return claimed, dict(run.final_result), steps, checks
        prompt = synthesize_prompt(run.goal, steps)
        try:
            request = request_in(session, run, prompt, read=read)
            if request is not None:
                return claimed, calls.reserve(session, run_id, request), steps, checks
        except ESCALATING as exc:  # no model call here; nothing written but the claim, kept
            return claimed, exc, steps, checks
    try:
        with renewed(claimed):  # the fold's model calls
            request = request_for(run_id, prompt)
        with session_scope() as session:
            return claimed, calls.reserve(session, run_id, request), steps, checks
    except RateLimited:
        raise
    except ESCALATING as exc:
        return claimed, exc, steps, checks


def _escalate(run_id: int, claimed: phases.Claimed, report: Reported, cap: int) -> list[Send]:
    """End the synthesis `claimed` holds by reporting what failed (`report`: the run escalates
    as `models.engine.escalation_rules` decides) in one transaction; returns what the dispatch of
    its user released, nothing when the phase was taken over."""
    with session_scope() as session:
        if not phases.end(
            session, run_id, claimed.attempt, statuses=SYNTHESIZING, used_s=claimed.held_s()
        ):
            return []  # another delivery took the phase over: it escalates, or not
        escalation_rules.escalate(session, run_id, report)
        return dispatch.dispatch(session, claimed.run.user_id, cap=cap)
