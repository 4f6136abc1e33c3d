"""The goal check: does what a run delivered meet its success criteria? (issue 12, item 1)

Once a synthesis has its answer, a run with success criteria (`runs.success_criteria`) asks the
model to judge them: the goal, the criteria (pinned facts put in: `models.engine.goal_checks.
criteria_texts`), the pinned facts, the deliverables' results and the answer go in; a
schema-constrained `{"met", "reason", "missing"}` comes out (`CheckSpec`), validated and re-asked
like a plan (`worker.model_calls.structured.ask`), each call charged to the run's budgets. The
offline provider judges by the criteria's values (`models.engine.goal_checks.rule_verdict`),
deterministically. A run without criteria, or whose check a reviewer waived, is not asked (`judge`
returns None).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field

from models.engine.coordinator import GoalVerdict
from models.tables import Step
from worker.model_calls.prompts import Prompt
from worker.model_calls.structured import Answer, ask, json_answer

CHECK_INSTRUCTIONS: Final = (
    "You check whether an agent's run met the user's goal. Judge each success criterion "
    "against the results the run delivered (not against the answer's wording: a value the "
    "results do not hold is not delivered). Pinned facts are the user's own statements. Answer "
    "with JSON only: 'met' (true only when every criterion holds), 'reason' (one sentence), "
    "'missing' (what the results lack, one short line each; [] when met)."
)
MAX_MISSING: Final = 20


class CheckSpec(BaseModel):
    """A goal check's answer, as the model writes it."""

    model_config = ConfigDict(extra="forbid")
    met: bool
    reason: str = Field(min_length=1, max_length=1000)
    missing: list[Annotated[str, Field(max_length=500)]] = Field(max_length=MAX_MISSING)


class Unjudged(Exception):
    """No verdict: the check could not be made or answered; `answer` says why (its `failure`,
    its `error`) and holds the model's last output, for the caller to report
    (`worker.model_calls.structured.unanswered`)."""

    def __init__(self, answer: Answer[Any]) -> None:
        super().__init__(f"{answer.failure or 'no valid goal check'}: {answer.error}")
        self.answer = answer


def check_prompt(
    goal: str,
    criteria: Sequence[str],
    deliverables: Mapping[str, Any],
    answer: str,
) -> Prompt:
    """The goal check's call: the static instructions and schema first, then what this run
    delivered (`deliverables`: step name -> result) and its `answer`."""
    task = (
        "Success criteria:\n"
        + "\n".join(f"- {c}" for c in criteria)
        + "\n\nWhat the run delivered (step name -> result):\n"
        + _json(deliverables)
        + f"\n\nThe run's answer:\n{answer}\n\nWere the criteria met?"
    )
    payload = {
        "goal": goal,
        "criteria": list(criteria),
        "deliverables": dict(deliverables),
        "answer": answer,
    }
    schema = CheckSpec.model_json_schema()
    return Prompt("check_goal", CHECK_INSTRUCTIONS, task, payload, schema)


def judge(
    run_id: int, goal: str, criteria: Sequence[str], deliverables: Sequence[Step], answer: str
) -> GoalVerdict | None:
    """The model's verdict on `criteria` (None when there are none), naming the last of the
    `deliverables` (`models.engine.goal_checks.deliverables`) as the step a replan replaces. Raises
    `Unjudged` when no valid answer came, and `RateLimited` (the caller defers)."""
    if not criteria:
        return None
    results = {s.name: s.result or {} for s in deliverables}
    prompt = check_prompt(goal, criteria, results, answer)
    checked: Answer[CheckSpec] = ask(run_id, prompt, json_answer(CheckSpec))
    if checked.value is None:
        raise Unjudged(checked)
    spec = checked.value
    missing = () if spec.met else tuple(spec.missing) or (spec.reason,)
    step_id = deliverables[-1].id if deliverables else None
    return GoalVerdict(spec.met, spec.reason, missing, step_id, "model", tuple(criteria))


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, default=str, ensure_ascii=False)
