"""A reviewer's answer as a step's result: read from what the reviewer typed, and checked
against what the step would have had to return (`models.review.reviews.respond`)."""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import Session, select

from models.errors import InvalidInput, InvalidStepOutput
from models.plans.expectations import loaded, unmet
from models.plans.step_data import json_bytes, over_cap
from models.plans.step_outputs import parse_output
from models.settings import get_settings
from models.storable import storable_problem
from models.tables import PinnedFact, Step


def json_object(given: Any, field: str) -> dict[str, Any]:
    """`given` (a dict, or JSON text of an object) as a dict; raises `InvalidInput` naming
    `field` for anything else."""
    if isinstance(given, str):
        try:
            given = json.loads(given)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"{field}: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(given, dict):
        raise InvalidInput(f"{field}: a JSON object, not {type(given).__name__}")
    return given


def answer_from_text(text: str, *, returns: tuple[str, ...]) -> dict[str, Any]:
    """A reviewer's typed answer as a result object.

    A JSON object is taken as it is. Any other value (`0.95`, `"yes"`) becomes `{key: value}` when
    the failed tool declares exactly one result key, else `{"answer": value}`. Raises
    `InvalidInput` when it is empty, holds what JSON cannot (`NaN`: `models.storable`), or is
    over `AGENTQ_STEP_DATA_MAX_BYTES` as JSON (a step's result, capped: `models.plans.step_data`).
    """
    if not text.strip():
        raise InvalidInput("respond: --answer must not be empty")
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError:
        value = text
    answer = (
        value if isinstance(value, dict) else {returns[0] if len(returns) == 1 else "answer": value}
    )
    if problem := storable_problem(answer, "answer"):
        raise InvalidInput(f"respond: {problem}")
    cap = get_settings().step_data_max_bytes
    if (size := json_bytes(answer)) > cap:
        raise InvalidInput(str(over_cap("answer", size, cap)))
    return answer


def answer_problem(step: Step, answer: dict[str, Any]) -> str | None:
    """Why `answer` cannot stand as step `step`'s result: not its declared `output` fields
    (`models.plans.step_outputs.parse_output`), or an unmet expectation
    (`models.plans.expectations`)."""
    if step.output:
        try:
            parse_output(json.dumps(answer), step.output)
        except InvalidStepOutput as exc:
            return str(exc)
    reasons = unmet(loaded(step.expect), answer)
    return f"step {step.name!r}: unmet expectation: " + "; ".join(reasons) if reasons else None


def pin_answer(session: Session, run_id: int, answer: dict[str, Any], *, set_by: str) -> None:
    """Pin `answer` as the run's `reviewer_answer` (a later answer replaces an earlier one)."""
    pinned = session.exec(
        select(PinnedFact).where(PinnedFact.run_id == run_id, PinnedFact.key == "reviewer_answer")
    ).one_or_none() or PinnedFact(run_id=run_id, key="reviewer_answer", value="")
    pinned.value, pinned.set_by = json.dumps(answer), set_by
    session.add(pinned)
