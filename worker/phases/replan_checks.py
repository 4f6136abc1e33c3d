"""The should-replan check, asked by a step's own worker (issue 12, item 2;
`models.plans.plan_checks`).

After a step succeeds, and before its outcome is recorded, a run that checks (`runs.replan_check`
= "model") with steps of its plan not started yet asks the model whether those steps still make
sense given the result: `{"go_on": bool, "reason": str}`, schema-constrained, validated and
re-asked like a plan (`worker.model_calls.structured.ask`), charged to the run. The answer travels
with the step's outcome (`Outcome.check`) into the transaction that records it (`note`), where the
coordinator reads it. The worker's lease on the step is renewed meanwhile, so a worker lost during
the call loses the step's attempt, as during the step itself. A check that cannot be made or
answered (a rate limit, a spent budget, answers that never validate) is skipped, logged and
recorded by the call's own events: the step succeeded, and the plan goes on; a spent budget
escalates at the next decision anyway.

The offline provider answers by rule (`worker.model_calls.offline`): `replan` when a value the
remaining steps refer to (`${steps.NAME.KEY}`) came back empty or missing (null, "", [], {}), as
receipts that found none make filing their report pointless; else `continue`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Final

import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlmodel import Session

from models.db import session_scope
from models.engine.decisions import Locked
from models.engine.runs import get_run
from models.errors import RateLimited
from models.plans import plan_checks
from models.plans.plans import current_steps
from models.plans.references import referenced_keys
from models.settings import get_settings
from models.tables import Step
from worker.execution.attempts import Claimed, Outcome
from worker.model_calls.prompts import Prompt
from worker.model_calls.structured import ask, json_answer

log = structlog.get_logger("agentq.worker")
CHECK_PLAN_INSTRUCTIONS: Final = (
    "You check an agent's plan while it runs. A step has just succeeded; given its result, "
    "decide whether the steps not started yet still make sense for the user's goal. Answer "
    "with JSON only: 'go_on' (false only when the result makes them pointless or wrong, e.g. "
    "it found nothing they need) and 'reason' (one sentence)."
)


class CheckPlanSpec(BaseModel):
    """The should-replan check's answer, as the model writes it."""

    model_config = ConfigDict(extra="forbid")
    go_on: bool
    reason: str = Field(min_length=1, max_length=plan_checks.REASON_MAX_CHARS)


def check_plan_prompt(goal: str, step: Step, result: Any, remaining: list[Step]) -> Prompt:
    """The check's call: the step that succeeded with its `result`, and the steps not started
    (their name, instruction, tool, and the keys of the result they refer to, `uses`)."""
    rest = [
        {
            "name": s.name,
            "instruction": s.instruction,
            "tool": s.tool,
            "uses": sorted(referenced_keys(s.args, step.name)),
        }
        for s in remaining
    ]
    done = {"name": step.name, "result": result}
    task = (
        f"Step that just succeeded:\n{_json(done)}\n\nSteps not started yet:\n{_json(rest)}"
        "\n\nDo they still make sense?"
    )
    payload = {"goal": goal, "step": done, "remaining": rest}
    schema = CheckPlanSpec.model_json_schema()
    return Prompt("check_plan", CHECK_PLAN_INSTRUCTIONS, task, payload, schema, query=None)


def with_check(claimed: Claimed, outcome: Outcome) -> Outcome:
    """`outcome` with the check's answer (`check`: `{"verdict", "reason", "source"}`) when the
    run checks, the step succeeded and steps of its plan have not started; else as it is.
    Raises `DatabaseUnavailable` (as the step's own reads do)."""
    step = claimed.step
    if outcome.kind != "succeeded" or claimed.replan_check != "model":
        return outcome
    with session_scope() as session:
        run = get_run(session, step.run_id)
        remaining = [s for s in current_steps(session, run) if s.status == "pending"]
        goal = run.goal
    if not remaining:
        return outcome
    prompt = check_plan_prompt(goal, step, outcome.result, remaining)
    try:
        answer = ask(step.run_id, prompt, json_answer(CheckPlanSpec))
    except RateLimited as exc:
        log.info("replan_check.skipped", step_id=step.id, reason=str(exc))
        return outcome
    if answer.value is None:
        log.info("replan_check.skipped", step_id=step.id, reason=answer.failure or answer.error)
        return outcome
    verdict = "continue" if answer.value.go_on else "replan"
    check = {"verdict": verdict, "reason": answer.value.reason, "source": get_settings().provider}
    return replace(outcome, check=check)


def note(session: Session, locked: Locked, step: Step, outcome: Outcome) -> None:
    """Record the check's answer that `outcome` carries (in the transaction recording the
    step's success), and show a `replan` to the coordinator's view of the run."""
    check = outcome.check
    if outcome.kind != "succeeded" or check is None:
        return
    plan_checks.record(session, step.id or 0, check["verdict"], check["reason"], check["source"])
    if check["verdict"] == "replan":
        locked.doubt(step.id or 0)


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, default=str, ensure_ascii=False)
