"""A model step's typed answer: check it, re-ask with the reason, a bounded number of times.

A model step that declares `output` (`models.plans.step_outputs`) is asked for JSON of its fields
(the request's json_schema, `worker.model_calls.prompts.step_prompt`). Its text answer is bad input
until `parse_output` accepts it: an answer cut off at the token limit, not JSON, or not of the
fields and types declared is refused with the reason, recorded as a `step.output.invalid` event with
the raw text, and the model is asked again with its answer and the reason, as plans are
(`worker.model_calls.structured`). After `AGENTQ_PLAN_MAX_ATTEMPTS` refused answers the step fails
with `InvalidStepOutput` (no retry: the coordinator replans or escalates). Only an answer that fits
becomes the step's result, whole: nothing of a refused one is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from models.db import session_scope
from models.engine import events
from models.errors import InvalidStepOutput
from models.plans.step_outputs import parse_output
from models.settings import get_settings
from models.tables import Step
from worker.model_calls.calls import waits_out_outages
from worker.model_calls.providers import Completion

RAW_OUTPUT_MAX_CHARS = 4000  # of a refused answer kept in its event


@dataclass
class OutputAnswers:
    """The answers of one attempt of `step` (which declares `output`), and how many of them
    were refused so far."""

    step: Step
    refused: int = 0

    def take(self, completion: Completion, exchange: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The fields of `completion`'s answer (the step's result), or None when it was refused
        and the re-ask was added to `exchange` (the caller asks again). Raises
        `InvalidStepOutput` naming the step, the number of answers and the last reason once
        `AGENTQ_PLAN_MAX_ATTEMPTS` answers were refused; `DatabaseUnavailable` if its event
        cannot be written."""
        try:
            if completion.finish_reason == "length":
                raise InvalidStepOutput("output: the answer was cut off at the token limit")
            return parse_output(completion.text, self.step.output or {})
        except InvalidStepOutput as exc:
            error = str(exc)
        self.refused += 1
        _record_invalid(self.step, self.refused, error, completion.text)
        limit = get_settings().plan_max_attempts
        if self.refused >= limit:
            raise InvalidStepOutput(
                f"step {self.step.name!r}: the model's answer did not fit the step's output "
                f"after {self.refused} answers (AGENTQ_PLAN_MAX_ATTEMPTS={limit}): {error}"
            )
        reask = f"That answer is invalid: {error}. Answer again, JSON only."
        exchange += [
            {"role": "assistant", "content": completion.text},
            {"role": "user", "content": reask},
        ]
        return None


@waits_out_outages
def _record_invalid(step: Step, answer: int, error: str, raw: str) -> None:
    with session_scope() as session:
        events.record_event(
            session,
            step.run_id,
            "step.output.invalid",
            step_id=step.id,
            answer=answer,
            error=error,
            raw_output=raw[:RAW_OUTPUT_MAX_CHARS],
        )
