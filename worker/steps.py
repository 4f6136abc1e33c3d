"""The execute-step task: claim the step, run its tool or model call, record the outcome.

The claim is a guarded transition (queued -> running) that takes a lease and the next attempt
number, so a message delivered twice runs the step once: the second delivery finds it running or
done and does nothing. The outcome is written only by the attempt that holds the step.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from billiard.exceptions import SoftTimeLimitExceeded

from models import transitions
from models.db import session_scope
from models.errors import (
    BudgetExhausted,
    IllegalTransition,
    ProviderError,
    RetryableToolError,
    ToolError,
)
from models.messages import add_message
from models.references import resolve
from models.runs import done_results, get_run, pinned_facts, tries_of_name
from models.settings import get_settings
from models.tables import Step
from worker.calls import call_model
from worker.prompts import step_prompt
from worker.tools import ToolContext, get_tool
from worker.working_memory import request_for

log = structlog.get_logger("agentq.worker")


def worker_name() -> str:
    """`host:pid` of this process (a pool child after the fork), recorded on each attempt."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class Outcome:
    """What one attempt of a step came to."""

    kind: Literal["succeeded", "retry", "failed"]
    result: dict[str, Any] | None = None
    error: str = ""


@dataclass(frozen=True)
class Claimed:
    """A claimed step with what it needs from its run."""

    step: Step
    facts: dict[str, str]
    results: dict[str, dict[str, Any]]
    tries: int


def claim(step_id: int) -> Claimed | None:
    """Claim step `step_id` for this process; None when another delivery already has it."""
    with session_scope() as session:
        try:
            step = transitions.claim_step(
                session, step_id, worker=worker_name(), lease_s=get_settings().lease_s
            )
        except IllegalTransition as exc:
            log.info("execute_step.skipped", step_id=step_id, reason=str(exc))
            return None
        run = get_run(session, step.run_id)
        return Claimed(
            step=step,
            facts=pinned_facts(session, step.run_id),
            results=done_results(session, run),
            tries=tries_of_name(session, step.run_id, step.name),
        )


def perform(claimed: Claimed) -> Outcome:
    """Run the step's tool or model call; every failure becomes an `Outcome`, never a crash."""
    step = claimed.step
    retryable = step.attempt < step.max_attempts
    try:
        return Outcome("succeeded", _run(claimed))
    except (RetryableToolError, SoftTimeLimitExceeded, ProviderError) as exc:
        error = _describe(exc)
        return Outcome("retry" if retryable else "failed", error=error)
    except (ToolError, BudgetExhausted) as exc:
        return Outcome("failed", error=_describe(exc))
    except Exception as exc:  # a tool's bug must fail its step, not the worker
        log.exception("execute_step.unexpected", step_id=step.id)
        return Outcome("failed", error=f"unexpected error: {_describe(exc)}")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, SoftTimeLimitExceeded):
        return "step exceeded its soft time limit"
    return str(exc) or type(exc).__name__


def _run(claimed: Claimed) -> dict[str, Any]:
    step = claimed.step
    if step.kind == "model":
        request = request_for(step.run_id, step_prompt(step.instruction, claimed.results))
        completion = call_model(step.run_id, request, step_id=step.id)
        return {"text": completion.text, "model": completion.model, "offline": completion.offline}
    tool = get_tool(step.tool or "")
    args = resolve(step.args, results=claimed.results, facts=claimed.facts)
    ctx = ToolContext(
        run_id=step.run_id,
        step_id=step.id or 0,
        step_name=step.name,
        attempt=step.attempt,
        tries_of_name=claimed.tries,
        facts=claimed.facts,
    )
    return tool.invoke(ctx, args)


def record(step: Step, outcome: Outcome) -> bool:
    """Write the outcome for the attempt that holds the step; False if it lost the lease."""
    step_id, attempt = step.id or 0, step.attempt
    with session_scope() as session:
        try:
            if outcome.kind != "retry":
                add_message(
                    session,
                    run_id=step.run_id,
                    user_id=get_run(session, step.run_id).user_id,
                    step_id=step_id,
                    role="assistant" if step.kind == "model" else "tool",
                    content=turn_text(step, outcome),
                )
            if outcome.kind == "succeeded":
                transitions.complete_step(
                    session, step_id, attempt=attempt, result=outcome.result or {}
                )
            elif outcome.kind == "retry":
                transitions.retry_step(session, step_id, attempt=attempt, error=outcome.error)
            else:
                transitions.fail_step(session, step_id, attempt=attempt, error=outcome.error)
        except IllegalTransition as exc:
            log.warning("execute_step.lost_lease", step_id=step_id, reason=str(exc))
            return False
    return True


def turn_text(step: Step, outcome: Outcome) -> str:
    """The step's outcome as a conversation turn: a model's text, or a tool call and its result."""
    if outcome.kind == "failed":
        return f"step {step.name} ({step.tool or step.kind}) failed: {outcome.error}"
    result = outcome.result or {}
    if step.kind == "model":
        return str(result.get("text", ""))
    return f"step {step.name}: {step.tool}({json.dumps(step.args)}) -> {json.dumps(result)}"


def retry_countdown_s(attempt: int) -> float:
    """Exponential backoff before attempt `attempt + 1`: backoff x 2^(attempt-1) seconds."""
    return float(get_settings().retry_backoff_s * 2 ** (attempt - 1))
