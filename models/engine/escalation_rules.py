"""What a worker reports when its phase or step cannot go on, and the escalation it comes to.

Escalation is decided in one place (issue 14): the coordinator escalates from its own decision
(`models.engine.decisions.escalate`); a worker never picks a reason nor moves the run itself. It
reports what failed (a `Reported` outcome below) to `escalate`, which decides the escalation
(`decide`, pure: the reason, what the reviewer is shown, the status the run must be in) and makes
the guarded move (`models.engine.run_transitions.escalate`) in the caller's transaction.

The outcomes, who reports them, and their reasons:
- `Crashed` (`worker.execution.crashes`: a bug in a plan, replan or synthesis task):
  `internal_error`;
- `DeferredTooOften` (`worker.execution.deferrals`: rate-limited past `AGENTQ_MODEL_MAX_DEFERRALS`):
  `rate_limited`;
- `Unanswered` (`worker.phases.planner`: no valid plan; `worker.phases.synthesis`: no valid goal
check): why no call could be made or answered, else `invalid_plan` or `invalid_goal_check`;
- `SynthesisFailed` (`worker.phases.synthesis`: no answer): the error's own `reason` (a spent
budget, an exhausted quota, an overflowing context), else `synthesis_failed`;
- `StepEscalated` (`worker.execution.steps`, when `failure_outcome` says `escalated`): its reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, assert_never

from sqlmodel import Session

from models.engine import run_transitions
from models.errors import BudgetExhausted, ContextOverflow, QuotaExhausted

INTERNAL_ERROR: Final = "internal_error"
RATE_LIMITED: Final = "rate_limited"
SYNTHESIS_FAILED: Final = "synthesis_failed"
# The reason when a structured answer was asked for and the model answered, never validly.
UNANSWERED_REASONS: Final = {"plan": "invalid_plan", "goal_check": "invalid_goal_check"}


@dataclass(frozen=True)
class Crashed:
    """The task of `phase` (`planning`, `replanning`, `synthesizing`) raised an error agentq did
    not raise on purpose; `error_type` is the exception's type name (its text may hold host
    paths: the worker log has it)."""

    phase: str
    error_type: str


@dataclass(frozen=True)
class DeferredTooOften:
    """The task of `phase` was rate-limited once more after its last deferral; `error` is the
    rate limit's message."""

    phase: str
    error: str


@dataclass(frozen=True)
class Unanswered:
    """A structured answer (`asked`: a plan, a goal check's verdict) never came valid in `phase`.
    `failure`: why no call could be made or answered
    (`worker.model_calls.structured.Answer.failure`), None when the model answered invalidly;
    `error`: the last refusal; `raw_output`: the model's last answer as much as is kept; `step_id`:
    the failed step a replan was for."""

    phase: str
    asked: Literal["plan", "goal_check"]
    failure: str | None
    error: str | None
    raw_output: str
    step_id: int | None = None


@dataclass(frozen=True)
class SynthesisFailed:
    """No answer could be asked for or came for a synthesis: `cause` is the error (a spent
    budget, an exhausted quota, an overflowing context, a provider failure)."""

    cause: Exception


@dataclass(frozen=True)
class StepEscalated:
    """Step `step_id` (`step`, its name; `tool`, empty for a model step) failed in a way a person
    must see (`worker.execution.steps.failure_outcome`): `reason` and `error` are the outcome's,
    `raw_output` the model's last tool calls when they were invalid."""

    step_id: int | None
    step: str
    tool: str
    error: str
    reason: str
    raw_output: str = ""


Reported = Crashed | DeferredTooOften | Unanswered | SynthesisFailed | StepEscalated


@dataclass(frozen=True)
class Escalating:
    """An escalation to open: the run moves from `expected` to `waiting_review`, with `reason`,
    `detail` (what the reviewer is shown) and the step it concerns."""

    expected: str
    reason: str
    detail: dict[str, Any]
    step_id: int | None = None


def decide(outcome: Reported) -> Escalating:
    """The escalation `outcome` comes to (pure: no effects), as the table above says. The
    detail is `{"error"}`, plus `"raw_output"` for an unanswered call, and for a step
    `{"step", "error", "tool"}` with `"raw_output"` when there is one."""
    match outcome:
        case Crashed(phase, error_type):
            error = f"{phase} failed with an internal error ({error_type}); see the worker log"
            return Escalating(phase, INTERNAL_ERROR, {"error": error})
        case DeferredTooOften(phase, error):
            return Escalating(phase, RATE_LIMITED, {"error": error})
        case Unanswered(phase, asked, failure, error, raw_output, step_id):
            reason = failure or UNANSWERED_REASONS[asked]
            return Escalating(phase, reason, {"error": error, "raw_output": raw_output}, step_id)
        case SynthesisFailed(cause):
            return Escalating("synthesizing", _reason_of(cause), {"error": str(cause)})
        case StepEscalated(step_id, step, tool, error, reason, raw_output):
            detail = {"step": step, "error": error, "tool": tool}
            return Escalating("running", reason, detail | _raw(raw_output), step_id)
        case _:
            assert_never(outcome)


def escalate(session: Session, run_id: int, outcome: Reported, *, found: str | None = None) -> bool:
    """Escalate run `run_id` as `decide` says for `outcome`, in the caller's transaction (the
    guarded move, the escalation row and its event: `models.engine.run_transitions.escalate`); True
    when the run moved to `waiting_review`.

    `found` is the run's status when the caller holds its lock (`models.engine.decisions.Locked`): a
    run found in another status than the outcome needs (a step's run cancelled meanwhile) is
    left as it is, and False is returned. Without it, raises `IllegalTransition` when the run is
    not in that status."""
    escalating = decide(outcome)
    if found is not None and found != escalating.expected:
        return False
    run_transitions.escalate(
        session,
        run_id,
        expected=escalating.expected,
        reason=escalating.reason,
        step_id=escalating.step_id,
        detail=escalating.detail,
    )
    return True


def _reason_of(cause: Exception) -> str:
    """An error's own escalation reason, else `synthesis_failed`."""
    if isinstance(cause, BudgetExhausted | QuotaExhausted | ContextOverflow):
        return cause.reason
    return SYNTHESIS_FAILED


def _raw(raw_output: str) -> dict[str, str]:
    return {"raw_output": raw_output} if raw_output else {}
