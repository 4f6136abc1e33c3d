"""Structured model output: ask, validate, re-ask with the error, a bounded number of times.

Model output is bad input until it validates. Output that is empty, cut off at the token limit
(`finish_reason == "length"`), not JSON, or JSON of the wrong shape is refused with the reason;
the model is asked again with its answer and the reason, up to `AGENTQ_PLAN_MAX_ATTEMPTS` calls,
each charged to the run. What remains invalid is returned as such, with the raw text, for the
caller to escalate; it is never taken as an empty answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Generic, TypeVar

from pydantic import ValidationError

from models import transitions
from models.db import session_scope
from models.errors import BudgetExhausted, InvalidPlan, ProviderError
from models.settings import get_settings
from worker.calls import call_model
from worker.prompts import Prompt
from worker.working_memory import request_for

T = TypeVar("T")
RAW_OUTPUT_MAX_CHARS = 4000


class InvalidOutput(ValueError):
    """A model answer that does not validate; the message says why."""


@dataclass(frozen=True)
class Answer(Generic[T]):
    """A validated answer (`value`), or the last raw output and why it was refused."""

    value: T | None
    raw: str
    error: str
    budget_spent: bool = False


def ask(run_id: int, prompt: Prompt, parse: Callable[[str], T]) -> Answer[T]:
    """Call the model for `prompt` until `parse` accepts its text, at most `plan_max_attempts`.

    `parse` raises `InvalidPlan`, `InvalidOutput` or pydantic's `ValidationError` for bad text.
    A provider failure or a spent token budget ends the asking at once.
    """
    request = request_for(run_id, prompt)
    messages, raw, error = list(request.messages), "", ""
    for attempt in range(1, get_settings().plan_max_attempts + 1):
        try:
            completion = call_model(run_id, replace(request, messages=list(messages)))
        except (ProviderError, BudgetExhausted) as exc:
            spent = isinstance(exc, BudgetExhausted)
            return Answer(None, raw, f"{type(exc).__name__}: {exc}", budget_spent=spent)
        raw = completion.text
        try:
            if completion.finish_reason == "length":
                raise InvalidOutput("output was cut off at the token limit (finish_reason=length)")
            return Answer(parse(raw), raw, "")
        except (InvalidPlan, InvalidOutput, ValidationError) as exc:
            error = _describe(exc)
        _record_invalid(run_id, prompt, attempt, error, raw)
        messages += [
            {"role": "assistant", "content": raw},
            {
                "role": "user",
                "content": f"That answer is invalid: {error}. Answer again, JSON only.",
            },
        ]
    return Answer(None, raw, error)


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        parts = [
            f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors()
        ]
        return "invalid answer: " + "; ".join(parts[:10])
    return str(exc)


def _record_invalid(run_id: int, prompt: Prompt, attempt: int, error: str, raw: str) -> None:
    with session_scope() as session:
        transitions.record_event(
            session,
            run_id,
            f"{prompt.purpose}.invalid",
            attempt=attempt,
            error=error,
            raw_output=raw[:RAW_OUTPUT_MAX_CHARS],
        )
