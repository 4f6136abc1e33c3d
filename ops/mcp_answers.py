"""What the tools of `agentq mcp` (`ops.mcp_server`) answer: the API's answers cut to what a
person in an MCP client needs, as pydantic models (each tool's `outputSchema` is its model's
JSON schema, and its result is structured content), and a refusal as one line.

Pure functions of the API's response models (`api.responses`); nothing here sends a request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import httpx
from pydantic import BaseModel, Field, ValidationError

from agentq.client import ApiError
from api.responses import DecisionOut, EscalationOut, ReviewOut, RunDetail, RunOut, StepOut
from models.review.reasons import REASON_TEXT

APPROVAL_REASON: Final = "approval_required"


class StepState(BaseModel):
    """One step of the run's current plan."""

    id: int
    name: str
    kind: str = Field(description="tool, model, ...")
    tool: str | None
    status: str
    attempt: int
    error: str | None


class OpenEscalation(BaseModel):
    """The escalation a run waits on: decide it with the review tools (a reviewer token)."""

    escalation_id: int
    reason: str
    why: str = Field(description="The reason in a reviewer's words.")
    status: str = Field(description="open or claimed")
    waiting_s: float = Field(description="Seconds since it opened.")


class RunState(BaseModel):
    """Where a run stands: its status, the steps of its current plan, the final answer once it
    succeeded or the error once it failed, and the escalation it waits on, if any."""

    run_id: int
    goal: str
    user: str
    status: str = Field(
        description="queued, planning, running, replanning, synthesizing, waiting_review, "
        "succeeded, failed or cancelled"
    )
    plan_version: int
    steps: list[StepState]
    answer: Any = Field(default=None, description="The final result (succeeded runs).")
    error: str | None = None
    escalation: OpenEscalation | None = None
    tokens_used: int
    cost_used_usd: float


class Submitted(BaseModel):
    """A submitted run: follow it with `run_status`."""

    run_id: int
    status: str
    user: str
    pinned_facts: dict[str, str]
    notified: bool = Field(
        description="False when the broker was down: the run is safe and starts once it is back."
    )


class RunListed(BaseModel):
    run_id: int
    goal: str
    user: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    error: str | None


class Runs(BaseModel):
    """Runs, newest first."""

    runs: list[RunListed]


class ReviewListed(BaseModel):
    """One escalation of the review queue."""

    escalation_id: int
    run_id: int
    goal: str
    reason: str
    status: str = Field(description="open, claimed or decided")
    step: str | None = Field(description="The step it is about, if any.")
    claimed_by: str | None
    waiting_s: float = Field(description="Seconds it waited (until its decision, if decided).")
    deadline_at: datetime | None


class Reviews(BaseModel):
    """The review queue, oldest first."""

    reviews: list[ReviewListed]


class GatedCall(BaseModel):
    """The tool call an `approval_required` escalation holds back, not run yet."""

    tool: str
    arguments: dict[str, Any]
    why: str = Field(description="The approval rule that matched.")


class FailedStep(BaseModel):
    name: str
    kind: str
    tool: str | None
    attempts: int
    error: str | None
    args: dict[str, Any]


class Decision(BaseModel):
    decision: str
    decided_by: str | None
    decided_at: datetime | None
    comment: str | None
    answer: dict[str, Any] | None


class ReviewShown(ReviewListed):
    """Why a run escalated and what a reviewer can do about it. For `approval_required`,
    `call` is the waiting tool call: `approve` runs it once as asked, `edit_arguments` runs it
    with other arguments, `reject` fails it, `respond` answers in its place. Otherwise
    `failed_step` is the step that failed: `approve` retries it, `edit_plan` replaces the steps
    not run yet, `respond` answers in its place, `reject` fails the run."""

    why: str = Field(description="The reason in a reviewer's words.")
    run_status: str
    pinned_facts: dict[str, str]
    call: GatedCall | None = None
    failed_step: FailedStep | None = None
    detail: dict[str, Any] = Field(description="The escalation's detail, as stored.")
    budget: dict[str, Any] | None = Field(
        default=None, description="A spent budget's standing (what approve would set)."
    )
    decision: Decision | None = None


class Claimed(BaseModel):
    """What `claim_review` claimed: None when no open escalation was left to claim."""

    review: ReviewListed | None
    said: str


class Decided(BaseModel):
    """A decision taken: the escalation and where its run stands now."""

    escalation_id: int
    run_id: int
    decision: str
    run_status: str
    said: str


class Principal(BaseModel):
    """Who this server acts as: the API token's name, role and user."""

    token: str
    role: str
    user: str | None
    api_url: str


def _step(step: StepOut) -> StepState:
    return StepState(
        id=step.id,
        name=step.name,
        kind=step.kind,
        tool=step.tool,
        status=step.status,
        attempt=step.attempt,
        error=step.error,
    )


def _why(reason: str) -> str:
    return REASON_TEXT.get(reason, reason)


def run_state(run: RunDetail) -> RunState:
    """`run` as `RunState`: the steps of its current plan version in plan order (every step,
    by id, before it has a plan), and its undecided escalation."""
    by_id = {step.id: step for step in run.steps}
    current = [by_id[i] for i in run.current_step_ids if i in by_id] or run.steps
    waiting = next((e for e in run.escalations if e.status != "decided"), None)
    return RunState(
        run_id=run.id,
        goal=run.goal,
        user=run.user_id,
        status=run.status,
        plan_version=run.plan_version,
        steps=[_step(step) for step in current],
        answer=run.final_result,
        error=run.error,
        escalation=None if waiting is None else _open(waiting),
        tokens_used=run.spend.tokens_used,
        cost_used_usd=run.spend.cost_used_usd,
    )


def _open(esc: EscalationOut) -> OpenEscalation:
    return OpenEscalation(
        escalation_id=esc.id,
        reason=esc.reason,
        why=_why(esc.reason),
        status=esc.status,
        waiting_s=esc.waiting_s,
    )


def run_listed(run: RunOut) -> RunListed:
    return RunListed(
        run_id=run.id,
        goal=run.goal,
        user=run.user_id,
        status=run.status,
        created_at=run.created_at,
        finished_at=run.finished_at,
        error=run.error,
    )


def review_listed(review: ReviewOut) -> ReviewListed:
    esc = review.escalation
    step = review.failed_step.name if review.failed_step else esc.detail.get("step")
    return ReviewListed(
        escalation_id=esc.id,
        run_id=esc.run_id,
        goal=review.run.goal,
        reason=esc.reason,
        status=esc.status,
        step=step if isinstance(step, str) else None,
        claimed_by=esc.claimed_by,
        waiting_s=esc.waiting_s,
        deadline_at=esc.deadline_at,
    )


def review_shown(review: ReviewOut) -> ReviewShown:
    """`review` in full: the gated call of an `approval_required` escalation (its `tool`,
    `arguments` and `why` from the detail), else the failed step, and the decision once made."""
    esc, failed = review.escalation, review.failed_step
    gated = esc.reason == APPROVAL_REASON and isinstance(esc.detail.get("arguments"), dict)
    return ReviewShown(
        **review_listed(review).model_dump(),
        why=_why(esc.reason),
        run_status=review.run.status,
        pinned_facts=review.pinned_facts,
        call=_gated(esc.detail) if gated else None,
        failed_step=None if failed is None or gated else _failed(failed),
        detail=esc.detail,
        budget=None if review.budget is None else review.budget.model_dump(),
        decision=None if esc.decision is None else Decision.model_validate(esc.model_dump()),
    )


def _gated(detail: dict[str, Any]) -> GatedCall:
    tool, why = detail.get("tool"), detail.get("why")
    return GatedCall(tool=str(tool or ""), arguments=detail["arguments"], why=str(why or ""))


def _failed(step: StepOut) -> FailedStep:
    return FailedStep(
        name=step.name,
        kind=step.kind,
        tool=step.tool,
        attempts=step.attempt,
        error=step.error,
        args=step.args if isinstance(step.args, dict) else step.args.model_dump(),
    )


def decided(done: DecisionOut) -> Decided:
    esc = done.escalation
    run = done.run
    said = done.said or f"escalation {esc.id} decided: {esc.decision}; run {run.id} is {run.status}"
    return Decided(
        escalation_id=esc.id,
        run_id=run.id,
        decision=esc.decision or "",
        run_status=run.status,
        said=said,
    )


def refusal(exc: Exception, api_url: str) -> str | None:
    """The one line an MCP client shows for `exc`, raised by a call to the API at `api_url`:
    the API's refusal (`403 Forbidden: role 'submitter' may not do this; ...`; a 422's fields
    as `field: problem`), a request refused before it was sent (pydantic, naming the field), or
    the API out of reach. None for any other exception (a bug: the SDK logs its traceback)."""
    if isinstance(exc, ApiError):
        if isinstance(exc.detail, list):
            return f"{exc.status} {exc.error or 'invalid request'}: {fields_line(exc.detail)}"
        hint = " (check AGENTQ_API_TOKEN or --token)" if exc.status == 401 else ""
        return _one_line(f"{exc.status} {exc.error or 'error'}: {exc.detail}{hint}")
    if isinstance(exc, ValidationError):
        return fields_line(exc.errors(include_url=False))
    if isinstance(exc, httpx.TransportError):
        reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return _one_line(f"agentq's API at {api_url} does not answer ({reason})")
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def fields_line(errors: list[Any]) -> str:
    """pydantic's (or FastAPI's) field errors in one line: `plan.steps.0.tool: Field required;
    ...` (FastAPI's leading `body` dropped)."""
    told = []
    for error in errors:
        if not isinstance(error, dict):
            told.append(str(error))
            continue
        loc = [str(part) for part in error.get("loc", ())]
        where = ".".join(loc[1:] if loc[:1] == ["body"] else loc)
        told.append(f"{where}: {error.get('msg', '')}" if where else str(error.get("msg", "")))
    return _one_line("; ".join(told)) or "invalid request"
