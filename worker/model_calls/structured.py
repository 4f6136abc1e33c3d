"""Structured model output: ask, validate, re-ask with the error, a bounded number of times.

Model output is bad input until it validates. Output that is empty, cut off at the token limit
(`finish_reason == "length"`), not JSON, or JSON of the wrong shape is refused with the reason;
the model is asked again with its answer and the reason, up to `AGENTQ_PLAN_MAX_ATTEMPTS` calls,
each charged to the run. What remains invalid is returned as such, with the raw text, for the
caller to escalate; it is never taken as an empty answer. A call that cannot be made ends the
asking with the reason to escalate with (`Answer.failure`); a rate limit is raised for the task
to defer itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from billiard.exceptions import SoftTimeLimitExceeded
from pydantic import BaseModel, ValidationError

from models.db import session_scope
from models.engine import escalation_rules, events
from models.errors import (
    BudgetExhausted,
    ContextOverflow,
    InvalidPlan,
    ProviderError,
    QuotaExhausted,
    RateLimited,
)
from models.settings import get_settings
from worker.model_calls.prompts import Prompt
from worker.model_calls.refits import Fitted

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
RAW_OUTPUT_MAX_CHARS = 4000
# What ends the asking with a reason to escalate (`RateLimited`, a ProviderError, is raised).
CALL_FAILURES = (ProviderError, BudgetExhausted, SoftTimeLimitExceeded, ContextOverflow)


class InvalidOutput(ValueError):
    """A model answer that does not validate; the message says why."""


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A validated answer (`value`), or the last raw output and why it was refused.

    `failure` is set when a call could not be made or answered at all: the escalation reason
    (`token_budget_spent`, `cost_budget_spent`, `quota_exhausted`, `provider_error`,
    `time_limit_exceeded`); None when the model answered and the answers were invalid.
    `payload` is what the last request was built from (`worker.memory.working_memory.build`: the
    procedures its context carried, among others); empty when no request was built.
    """

    value: T | None
    raw: str
    error: str
    failure: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)


def ask(run_id: int, prompt: Prompt, parse: Callable[[str, Mapping[str, Any]], T]) -> Answer[T]:
    """Call the model for `prompt` until `parse` accepts its text, at most `plan_max_attempts`.

    `parse(text, payload)` gets the answer's text and the payload its request was built with
    (what the context carried: recalled procedures, for one, `worker.phases.adoption`); it raises
    `InvalidPlan`, `InvalidOutput` or pydantic's `ValidationError` for bad text.
    A spent budget, an exhausted quota, a provider failure that outlasted its retries, a context
    that overflows (ours, or the server's window after one smaller rebuild:
    `worker.model_calls.refits`), or the task's soft time limit ends the asking at once. Raises
    `RateLimited` (the caller defers).
    """
    try:
        fitted = Fitted.build(run_id, prompt)  # may fold old turns into a summary: a call
    except RateLimited:
        raise
    except CALL_FAILURES as exc:
        return _unanswered(exc, "")
    reasks: list[dict[str, Any]] = []
    raw, error = "", ""
    for attempt in range(1, get_settings().plan_max_attempts + 1):
        try:  # a re-ask carries the refused answers after the request's own messages
            completion = fitted.call(reasks)
        except RateLimited:
            raise
        except CALL_FAILURES as exc:
            return _unanswered(exc, raw)
        raw = completion.text
        payload = fitted.request.payload  # what this request carried (a refit rebuilds it)
        try:
            if completion.finish_reason == "length":
                raise InvalidOutput("output was cut off at the token limit (finish_reason=length)")
            return Answer(parse(raw, payload), raw, "", payload=payload)
        except (InvalidPlan, InvalidOutput, ValidationError) as exc:
            error = _describe(exc)
        _record_invalid(run_id, prompt, attempt, error, raw)
        reasks += [
            {"role": "assistant", "content": raw},
            {
                "role": "user",
                "content": f"That answer is invalid: {error}. Answer again, JSON only.",
            },
        ]
    return Answer(None, raw, error, payload=fitted.request.payload)


def unanswered(
    answer: Answer[Any],
    phase: str,
    asked: Literal["plan", "goal_check"],
    *,
    error: str | None = None,
    step_id: int | None = None,
) -> escalation_rules.Unanswered:
    """What `phase` reports when `answer` (to `asked`) never came valid: its failure, `error`
    (by default the answer's own) and its raw output, at most `RAW_OUTPUT_MAX_CHARS`; the
    escalation it comes to is `models.engine.escalation_rules.decide`'s."""
    raw = answer.raw[:RAW_OUTPUT_MAX_CHARS]
    why = answer.error if error is None else error
    return escalation_rules.Unanswered(phase, asked, answer.failure, why, raw, step_id)


def json_answer(model: type[M]) -> Callable[[str, Mapping[str, Any]], M]:
    """A parse for `ask` whose answer is JSON of pydantic `model`, whatever the payload."""

    def parse(text: str, _payload: Mapping[str, Any]) -> M:
        return model.model_validate_json(text)

    return parse


def _unanswered(exc: BaseException, raw: str) -> Answer[Any]:
    if isinstance(exc, BudgetExhausted | QuotaExhausted | ContextOverflow):
        failure = exc.reason
    elif isinstance(exc, SoftTimeLimitExceeded):
        failure = "time_limit_exceeded"
    else:
        failure = "provider_error"
    return Answer(None, raw, f"{type(exc).__name__}: {exc}", failure=failure)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()
        ]
        return "invalid answer: " + "; ".join(parts[:10])
    return str(exc)


def _record_invalid(run_id: int, prompt: Prompt, attempt: int, error: str, raw: str) -> None:
    with session_scope() as session:
        events.record_event(
            session,
            run_id,
            f"{prompt.purpose}.invalid",
            attempt=attempt,
            error=error,
            raw_output=raw[:RAW_OUTPUT_MAX_CHARS],
        )
