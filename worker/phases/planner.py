"""The plan and replan tasks: ask the model for a plan, validate it, write it as a plan version.

Model output is bad input until it validates (`models.plans.plans.parse_plan`);
`worker.model_calls.structured.ask` re-asks with the validation error a bounded number of times,
each call charged to the run; after that the run escalates with the raw output attached. Invalid
output is never taken as an empty plan. The transaction that writes the plan waits out a database
outage (`worker.model_calls.calls.waits_out_outages`): the answer is paid for, and a retry of the
task would find the phase claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog
from sqlmodel import Session

from models.db import session_scope
from models.engine import escalation_rules, events, phases, repeats, transitions
from models.engine.goal_checks import last_unmet
from models.engine.runs import add_criteria, pinned_facts
from models.errors import InvalidPlan
from models.memory.procedure_recall import RECALLED
from models.plans import plan_checks
from models.plans.plan_writes import add_plan_version
from models.plans.plans import (
    PlanSpec,
    Splice,
    current_graph,
    current_steps,
    edit_splice,
    parse_plan,
)
from models.plans.tools import argument_problems, catalog
from models.settings import get_settings
from models.states import STEP_NOT_STARTED
from models.tables import Run, Step
from worker.execution.claims import claim_phase_in, renewed
from worker.memory import procedure_learning
from worker.model_calls import calls
from worker.model_calls.prompts import Prompt, plan_prompt, replan_prompt
from worker.model_calls.structured import Answer, ask, unanswered
from worker.phases import adoption

log = structlog.get_logger("agentq.worker")


def ask_for_plan(
    run_id: int, prompt: Prompt, *, splice: Splice, facts: set[str]
) -> Answer[PlanSpec]:
    """Ask until the answer is a valid plan where `splice` puts it: registered tools with valid
    arguments, a graph whose references name only steps the referring step waits for, pinned
    facts, each step name once (`models.plans.plans.parse_plan`)."""
    tools = [t["name"] for t in catalog()]
    kept = {s.name for s in splice.kept if s.id != splice.replaced}

    def parse(text: str, payload: Mapping[str, Any]) -> PlanSpec:
        plan = adoption.expand(text, payload, kept=kept)  # `{"procedure": ID}`: its template
        return parse_plan(
            plan, tools=tools, splice=splice, facts=facts, check_args=argument_problems
        )

    return ask(run_id, prompt, parse)


def plan(run_id: int) -> bool:
    """Write plan version 1 for a `planning` run, or escalate; True when the run moved on, False
    when there was nothing to do (another delivery holds the phase, or the run left it). Raises
    `PhaseNotDue` for a deferred phase whose time has not come. The plan of an earlier run of the
    same request that succeeded alone is written with no model call (`reused`)."""
    with session_scope() as session:
        claimed = claim_phase_in(session, run_id, ("planning",))
        if claimed is None:
            return False
        facts = set(pinned_facts(session, run_id))
        found = repeats.plan_to_reuse(session, run_id) if get_settings().reuse_plans else None
    if found is not None and (reused := _reusable(found, facts)) is not None:
        return _write_plan(run_id, claimed, Answer(reused, raw="", error=""), reused=found)
    run = claimed.run
    with renewed(claimed):
        answer = ask_for_plan(
            run_id, plan_prompt(run.goal, catalog()), splice=Splice(), facts=facts
        )
    return _write_plan(run_id, claimed, answer)


def replan(run_id: int, failed_step_id: int) -> bool:
    """Put new steps in the place of the failed step (a new plan version), or escalate; returns
    and raises as `plan` does. A step that succeeded is replanned for one of two reasons: the
    should-replan check after it answered `replan` (`models.plans.plan_checks`: the steps not
    started yet are dropped, and the new ones follow it), or the run's goal check found the goal not
    met (`models.engine.goal_checks`: the new steps replace it). The prompt says which, with the
    check's reason (and what is missing) instead of an error."""
    with session_scope() as session:
        claimed = claim_phase_in(session, run_id, ("replanning",))
        if claimed is None:
            return False
        run = claimed.run
        doubt = plan_checks.replan_reason(session, run_id, run.plan_version, failed_step_id)
        splice = _splice(session, run, failed_step_id, doubt)
        failed = next((s for s in splice.kept if s.id == failed_step_id), None)
        if failed is None:  # not this run's failed step: a message from before the claim's time
            log.info("replan.skipped", run_id=run_id, step_id=failed_step_id)
            phases.end(
                session, run_id, claimed.attempt, statuses=("replanning",), used_s=claimed.held_s()
            )
            return False
        facts = set(pinned_facts(session, run_id))
        unmet = last_unmet(session, run) if failed.status == "succeeded" and not doubt else None
        prompt = replan_prompt(run.goal, catalog(), failed, unmet=unmet, doubt=doubt)
    if doubt:
        why = f"the check after step {failed.name!r}: {doubt}"
    else:
        why = f"goal not met: {unmet['reason']}" if unmet else f"step {failed.name!r} failed"
    with renewed(claimed):
        answer = ask_for_plan(run_id, prompt, splice=splice, facts=facts)
    return _write_replan(run_id, claimed, answer, failed, why, doubt=doubt)


def _splice(session: Session, run: Run, step_id: int, doubt: str | None) -> Splice:
    """Where a replan's steps go: after the steps that started, in place of those that did not,
    after a should-replan check's `doubt` (`models.plans.plans.edit_splice`); else in the place of
    step `step_id` (`models.plans.plans.current_graph`)."""
    if doubt is not None:
        return edit_splice(session, run, replaced=None)
    return current_graph(session, run, replaced=step_id)


def _reusable(found: repeats.Reusable, facts: set[str]) -> PlanSpec | None:
    """The plan `repeats.plan_to_reuse` found, validated as a planner's (`parse_plan`), or None
    when it no longer validates (a tool removed or changed since): then the planner is asked."""
    tools = [t["name"] for t in catalog()]
    try:
        return parse_plan(found.plan, tools=tools, facts=facts, check_args=argument_problems)
    except InvalidPlan as stale:
        log.info("plan.not_reused", source_run_id=found.source_id, reason=str(stale))
        return None


@calls.waits_out_outages
def _write_plan(
    run_id: int,
    claimed: phases.Claimed,
    answer: Answer[PlanSpec],
    *,
    reused: repeats.Reusable | None = None,
) -> bool:
    """End the planning `claimed` holds with `answer`'s plan, or escalate (one transaction); a
    plan `reused` from an earlier run (`models.engine.repeats`) keeps its author and is recorded
    as `plan.reused` (`{"from_run"}`)."""
    with session_scope() as session:
        if not phases.end(
            session, run_id, claimed.attempt, statuses=("planning",), used_s=claimed.held_s()
        ):
            return False
        locked = transitions.lock_run(session, run_id)
        if locked is None:
            return False
        if answer.value is None:
            escalation_rules.escalate(session, run_id, unanswered(answer, "planning", "plan"))
            return True
        add_plan_version(
            session,
            locked,
            splice=Splice(),
            new=answer.value.steps,
            created_by=reused.author
            if reused
            else adoption.author(answer.payload, default="planner"),
            max_attempts=get_settings().step_max_attempts,
        )
        add_criteria(locked, answer.value.success_criteria, by="planner")
        if reused is not None:
            events.record_event(session, run_id, "plan.reused", from_run=reused.source_id)
        else:
            record_procedures(session, run_id, answer, purpose="plan", plan_version=1)
        transitions.resume_run(session, run_id, expected="planning", plan_version=1)
    return True


def record_procedures(
    session: Session, run_id: int, answer: Answer[PlanSpec], *, purpose: str, plan_version: int
) -> None:
    """Record which procedures the context of `answer`'s request carried (`procedures.recalled`:
    `{"purpose", "plan_version", "procedures": [{"id", "version", "title", "scope", "origin"}],
    "adopted": the id the answer adopted, or null}`: `worker.phases.adoption`), in the caller's
    transaction, the one that writes plan version `plan_version`; nothing when none."""
    keys = ("id", "version", "title", "scope", "origin")
    used = [{k: p.get(k) for k in keys} for p in answer.payload.get("procedures") or []]
    if used:
        events.record_event(
            session,
            run_id,
            RECALLED,
            purpose=purpose,
            plan_version=plan_version,
            procedures=used,
            adopted=adoption.adopted_id(answer.raw),
        )


@calls.waits_out_outages
def _write_replan(
    run_id: int,
    claimed: phases.Claimed,
    answer: Answer[PlanSpec],
    failed: Step,
    why: str,
    *,
    doubt: str | None = None,
) -> bool:
    """End the replanning `claimed` holds by splicing `answer`'s steps in for step `failed`
    (where `_splice` puts them; the version's reason: `why`), or escalate when there are none
    or they no longer fit the graph (one transaction)."""
    with session_scope() as session:
        if not phases.end(
            session, run_id, claimed.attempt, statuses=("replanning",), used_s=claimed.held_s()
        ):
            return False
        locked = transitions.lock_run(session, run_id)
        if locked is None:
            return False
        # an adopted template that needed this replan did not hold, whatever the replan answers
        procedure_learning.record_replanned(session, run_id, why)
        error = answer.error
        if answer.value is not None:
            splice = _splice(session, locked, failed.id or 0, doubt)
            try:  # the graph is checked again: steps may have ended since the call
                add_plan_version(
                    session,
                    locked,
                    splice=splice,
                    new=answer.value.steps,
                    created_by=adoption.author(answer.payload, default="replanner"),
                    reason=f"{why}: {failed.error}" if failed.error else why,
                    max_attempts=get_settings().step_max_attempts,
                )
            except InvalidPlan as exc:
                error = str(exc)
            else:
                kept = {s.id for s in splice.kept}
                for dropped in current_steps(session, locked):  # (after a check: not started)
                    if dropped.id not in kept and dropped.status in STEP_NOT_STARTED:
                        transitions.cancel_step(session, dropped.id or 0)
                version = locked.plan_version + 1
                record_procedures(session, run_id, answer, purpose="replan", plan_version=version)
                transitions.resume_run(session, run_id, expected="replanning", plan_version=version)
                return True
        report = unanswered(answer, "replanning", "plan", error=error, step_id=failed.id)
        escalation_rules.escalate(session, run_id, report)
    return True
