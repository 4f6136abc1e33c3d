"""The plan and replan tasks: ask the model for a plan, validate it, write it as a plan version.

Model output is bad input until it validates (`models.plans.parse_plan`); `worker.structured.ask`
re-asks with the validation error a bounded number of times, each call charged to the run; after
that the run escalates with the raw output attached. Invalid output is never taken as an empty
plan.
"""

from __future__ import annotations

import structlog

from models import transitions
from models.db import session_scope
from models.plans import PlanSpec, add_plan_version, current_steps, parse_plan
from models.runs import get_run, pinned_facts
from models.settings import get_settings
from models.tools import argument_problems, catalog
from worker.prompts import Prompt, plan_prompt, replan_prompt
from worker.structured import RAW_OUTPUT_MAX_CHARS, Answer, ask

log = structlog.get_logger("agentq.worker")


def reason(answer: Answer[PlanSpec]) -> str:
    """The escalation reason when there is no plan: why no call could be made or answered
    (`Answer.failure`), else `invalid_plan`."""
    return answer.failure or "invalid_plan"


def ask_for_plan(
    run_id: int, prompt: Prompt, *, earlier: set[str], facts: set[str]
) -> Answer[PlanSpec]:
    """Ask until the answer is a valid plan: registered tools with valid arguments, references
    only to earlier steps and pinned facts, each step name once (`models.plans.parse_plan`)."""
    tools = [t["name"] for t in catalog()]

    def parse(text: str) -> PlanSpec:
        return parse_plan(
            text, tools=tools, earlier=earlier, facts=facts, check_args=argument_problems
        )

    return ask(run_id, prompt, parse)


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
        if answer.value is None:
            transitions.escalate(
                session,
                run_id,
                expected="planning",
                reason=reason(answer),
                detail={"error": answer.error, "raw_output": answer.raw[:RAW_OUTPUT_MAX_CHARS]},
            )
            return True
        add_plan_version(
            session,
            locked,
            before=[],
            new=answer.value.steps,
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
        if answer.value is None:
            transitions.escalate(
                session,
                run_id,
                expected="replanning",
                reason=reason(answer),
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
            new=answer.value.steps,
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
