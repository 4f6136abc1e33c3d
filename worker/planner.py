"""The plan and replan tasks: ask the model for a plan, validate it, write it as a plan version.

Model output is bad input until it validates (`models.plans.parse_plan`). Invalid output is
re-asked with the validation error up to `AGENTQ_PLAN_MAX_ATTEMPTS` times, each call charged to the
run; after that the run escalates with the raw output attached. Invalid output is never taken as an
empty plan.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import structlog

from models import transitions
from models.db import session_scope
from models.errors import BudgetExhausted, InvalidPlan, ProviderError
from models.plans import PlanSpec, add_plan_version, current_steps, parse_plan
from models.runs import get_run, pinned_facts
from models.settings import get_settings
from worker.calls import call_model
from worker.prompts import Prompt, plan_prompt, replan_prompt
from worker.tools import argument_problems, catalog
from worker.working_memory import request_for

log = structlog.get_logger("agentq.worker")
RAW_OUTPUT_MAX_CHARS = 4000


@dataclass(frozen=True)
class PlanAnswer:
    """A validated plan, or the last raw output and why it was refused."""

    plan: PlanSpec | None
    raw: str
    error: str
    budget_spent: bool = False

    @property
    def reason(self) -> str:
        """The escalation reason when there is no plan."""
        return "token_budget_spent" if self.budget_spent else "invalid_plan"


def ask_for_plan(run_id: int, prompt: Prompt, *, earlier: set[str], facts: set[str]) -> PlanAnswer:
    """Call the model until its answer validates, at most `plan_max_attempts` times.

    The answer must name registered tools with valid arguments, refer only to earlier steps and
    pinned facts, and use each step name once. A spent token budget ends the asking at once.
    """
    tools = [t["name"] for t in catalog()]
    request = request_for(run_id, prompt)
    messages, raw, error = list(request.messages), "", ""
    for attempt in range(1, get_settings().plan_max_attempts + 1):
        try:
            completion = call_model(run_id, replace(request, messages=list(messages)))
        except (ProviderError, BudgetExhausted) as exc:
            return PlanAnswer(
                None,
                raw,
                f"{type(exc).__name__}: {exc}",
                budget_spent=isinstance(exc, BudgetExhausted),
            )
        raw = completion.text
        try:
            if completion.finish_reason == "length":
                raise InvalidPlan("output was cut off at the token limit (finish_reason=length)")
            plan = parse_plan(
                raw, tools=tools, earlier=earlier, facts=facts, check_args=argument_problems
            )
            return PlanAnswer(plan, raw, "")
        except InvalidPlan as exc:
            error = str(exc)
        with session_scope() as session:
            transitions.record_event(
                session,
                run_id,
                "plan.invalid",
                attempt=attempt,
                error=error,
                raw_output=raw[:RAW_OUTPUT_MAX_CHARS],
            )
        messages += [
            {"role": "assistant", "content": raw},
            {
                "role": "user",
                "content": f"That answer is invalid: {error}. Answer again, JSON only.",
            },
        ]
    return PlanAnswer(None, raw, error)


def plan(run_id: int) -> bool:
    """Write plan version 1 for a `planning` run, or escalate; True when the run moved on."""
    with session_scope() as session:
        run = get_run(session, run_id)
        if run.status != "planning":
            log.info("plan.skipped", run_id=run_id, status=run.status)
            return False
        facts = set(pinned_facts(session, run_id))
    answer = ask_for_plan(run_id, plan_prompt(run.goal, catalog()), earlier=set(), facts=facts)
    with session_scope() as session:
        locked = transitions.lock_run(session, run_id)
        if locked is None or locked.status != "planning":
            return False
        if answer.plan is None:
            transitions.escalate(
                session,
                run_id,
                expected="planning",
                reason=answer.reason,
                detail={"error": answer.error, "raw_output": answer.raw[:RAW_OUTPUT_MAX_CHARS]},
            )
            return True
        add_plan_version(
            session,
            locked,
            before=[],
            new=answer.plan.steps,
            after=[],
            created_by="planner",
            max_attempts=get_settings().step_max_attempts,
        )
        transitions.resume_run(session, run_id, expected="planning", plan_version=1)
    return True


def replan(run_id: int, failed_step_id: int) -> bool:
    """Splice new steps in after the failed step (a new plan version), or escalate."""
    with session_scope() as session:
        run = get_run(session, run_id)
        steps = current_steps(session, run)
        failed = next((s for s in steps if s.id == failed_step_id), None)
        if run.status != "replanning" or failed is None:
            log.info("replan.skipped", run_id=run_id, status=run.status, step_id=failed_step_id)
            return False
        index = steps.index(failed)
        earlier = {s.name for s in steps[:index] if s.status == "succeeded"}
        facts = set(pinned_facts(session, run_id))
        prompt = replan_prompt(run.goal, catalog(), failed)
    answer = ask_for_plan(run_id, prompt, earlier=earlier, facts=facts)
    with session_scope() as session:
        locked = transitions.lock_run(session, run_id)
        if locked is None or locked.status != "replanning":
            return False
        if answer.plan is None:
            transitions.escalate(
                session,
                run_id,
                expected="replanning",
                reason=answer.reason,
                step_id=failed_step_id,
                detail={"error": answer.error, "raw_output": answer.raw[:RAW_OUTPUT_MAX_CHARS]},
            )
            return True
        steps = current_steps(session, locked)
        index = [s.id for s in steps].index(failed_step_id)
        add_plan_version(
            session,
            locked,
            before=steps[: index + 1],
            new=answer.plan.steps,
            after=steps[index + 1 :],
            created_by="replanner",
            reason=f"step {failed.name!r} failed: {failed.error}",
            replaces_step_id=failed_step_id,
            max_attempts=get_settings().step_max_attempts,
        )
        transitions.resume_run(
            session, run_id, expected="replanning", plan_version=locked.plan_version + 1
        )
    return True
