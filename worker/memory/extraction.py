"""Fact extraction at a run's end: whether to ask the model, and asking it.

Extraction reads only the user's own words (the goal and the facts the user pinned), never what
a reviewer set (issue 9, finding 5), with the run's failures and what fixed them, in the context
of the run's rows (`worker.memory.working_memory.request_for`). It is a model call, charged to the
run, so a run with nothing to learn from makes none (`skip_reason`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from models.review.authorship import StepFields
from models.storable import parse_json
from worker.model_calls.prompts import FactSpec, FactsSpec, extract_prompt
from worker.model_calls.structured import InvalidOutput, ask

NOTHING_TO_LEARN = "no model steps, no failures to learn from and no facts pinned by the user"


def skip_reason(*, model_steps: int, failures: int, stated_facts: int) -> str | None:
    """Why a run's fact extraction is skipped, or None when the model is asked.

    Skipped only when the run had no model steps (`model_steps`: steps of kind `model`, in any
    plan version), no failures its user's memory keeps (`failures`, as
    `worker.memory.run_memory.run_memory` counts them) and no facts pinned by its user
    (`stated_facts`): then the extraction could only restate the goal, which the run's episode
    already keeps (embedded and recalled like a fact). So an explicit plan of tool steps with no
    facts, such as the benchmark's no-op runs, makes no call, while a tool-only run that pins facts
    or learns from a failure still extracts them (issue 10).
    """
    if model_steps or failures or stated_facts:
        return None
    return NOTHING_TO_LEARN


def model_steps(steps: Sequence[StepFields]) -> int:
    """How many of `steps` are model steps (kind `model`)."""
    return sum(1 for s in steps if s.kind == "model")


def extract_facts(
    run_id: int, goal: str, failures: list[dict[str, Any]], stated: dict[str, str]
) -> list[FactSpec]:
    """Ask the model for run `run_id`'s durable facts (`stated`: the facts its user pinned).

    Raises `InvalidOutput` when no valid answer came after the re-asks (or the call could not be
    made: a spent budget, a provider failure), and `RateLimited` as
    `worker.model_calls.structured.ask` does.
    """
    answer = ask(run_id, extract_prompt(goal, failures, stated), _facts_answer)
    if answer.value is None:
        raise InvalidOutput(f"no valid facts after re-asking: {answer.error}")
    return list(answer.value.facts)


def _facts_answer(text: str, _payload: Mapping[str, Any]) -> FactsSpec:
    """A fact-extraction answer; raises `InvalidOutput` for text that is not JSON and pydantic's
    `ValidationError` for JSON of the wrong shape."""
    try:
        data = parse_json(text)
    except ValueError as exc:
        raise InvalidOutput(f"the answer is not JSON: {exc}") from exc
    return FactsSpec.model_validate(data)
