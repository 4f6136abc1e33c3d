"""The plan a reviewer's edit starts from: what `agentq review plan` prints and the review
console's edit box holds, as the JSON `agentq review edit --plan` and the edit decision take.

It is the failed step (to fix) and every step not yet run, each with its `after` written out by
name (`[]` for none), so sending it back unchanged rebuilds the same graph: the new steps take
the failed step's place, and their `after` may name the steps kept (those that ran, or still
run; `models.review.reviews.edit`). With no plan (the planner's output never validated) it is the
planner's raw output when that is JSON, else the smallest plan that validates. Reads rows only.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sqlmodel import Session

from models.engine.goal_checks import GOAL_NOT_MET
from models.plans.plans import MAX_INSTRUCTION_CHARS, current_graph, handled_failures
from models.plans.step_specs import spec_of
from models.states import STEP_NOT_STARTED
from models.tables import Escalation, Run, Step

PLAN_NOTE_REMAINING: Final = (
    'The failed step and every step not yet run, each with "after", the steps it waits for: '
    "these replace every step that has not run yet."
)
PLAN_NOTE_MISSED: Final = (
    "The step whose result missed the goal (see what is missing above), and every step not yet "
    'run, each with "after": the new steps replace that step and every step not yet run.'
)
PLAN_NOTE_RAW: Final = (
    "The planner's last output, which did not validate (see the error above): fix it and approve."
)
PLAN_NOTE_EXAMPLE_UNUSABLE: Final = (
    "The planner's output (above) is not JSON with steps, so this is an example plan that "
    "validates: one model step answering the goal. Replace it with the steps the run should take."
)
PLAN_NOTE_EXAMPLE: Final = (
    "The run has no plan and the planner left no output, so this is an example plan that "
    "validates: one model step answering the goal. Replace it with the steps the run should take."
)


@dataclass(frozen=True)
class StartingPlan:
    """An edit's starting text (JSON, indented), and a line saying what it is."""

    text: str
    note: str


def draft(session: Session, esc: Escalation) -> StartingPlan:
    """`starting_plan` for `esc`, read from its run's current plan version."""
    run = session.get(Run, esc.run_id)
    failed = session.get(Step, esc.step_id) if esc.step_id else None
    graph = current_graph(session, run) if run is not None else None
    steps = list(graph.kept) if graph is not None else []
    after = (graph.after if graph is not None else None) or {}
    answered = handled_failures(session, esc.run_id)
    return starting_plan(esc, run, steps, failed, after, answered=answered)


def starting_plan(
    esc: Escalation,
    run: Run | None,
    steps: Sequence[Step],
    failed: Step | None,
    after: Mapping[int, Iterable[int]],
    *,
    answered: Collection[int] = (),
) -> StartingPlan:
    """The failed step (or, for `goal_not_met`, the deliverable that missed the goal: an edit
    replaces it, `models.plans.graph.remaining`), the other failures not `answered` yet (other
    branches': an edit replaces them too) and every step of `steps` (the current version's, in
    order) not yet run,
    with `after` (what each waits for, by id: `models.plans.plans.dependencies`) by name. With none:
    the planner's raw output when it is JSON, else `example_plan`."""
    todo = [s for s in steps if s.status in STEP_NOT_STARTED]
    others = [
        s
        for s in steps
        if s.status == "failed" and s.id not in answered and (failed is None or s.id != failed.id)
    ]
    todo = [*others, *todo]
    missed = failed is not None and failed.status == "succeeded" and esc.reason == GOAL_NOT_MET
    if failed is not None and (failed.status == "failed" or missed):
        todo = [failed, *todo]
    if todo:
        names = {s.id or 0: s.name for s in [*steps, *todo]}
        specs = [
            spec_of(s, [names.get(d, f"#{d}") for d in after.get(s.id or 0, ())]) for s in todo
        ]
        return StartingPlan(
            _dumps({"steps": specs}), PLAN_NOTE_MISSED if missed else PLAN_NOTE_REMAINING
        )
    raw = planner_json(esc.detail.get("raw_output"))
    if raw and raw != {"steps": []}:
        return StartingPlan(_dumps(raw), PLAN_NOTE_RAW)
    note = PLAN_NOTE_EXAMPLE_UNUSABLE if esc.detail.get("raw_output") else PLAN_NOTE_EXAMPLE
    return StartingPlan(_dumps(example_plan(run.goal if run else "")), note)


def planner_json(raw: Any) -> dict[str, Any] | list[Any] | None:
    """The planner's raw output as a JSON object or array: the whole text, else the part from
    its first `{` or `[` to its last `}` or `]` (a ```json fence, a sentence around it); None
    when there is none."""
    if not isinstance(raw, str):
        return None
    found = _json_value(raw)
    starts = [i for i in (raw.find("{"), raw.find("[")) if i >= 0]
    if found is None and starts:
        found = _json_value(raw[min(starts) : max(raw.rfind("}"), raw.rfind("]")) + 1])
    return found


def _json_value(text: str) -> dict[str, Any] | list[Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict | list) else None


def example_plan(goal: str) -> dict[str, Any]:
    """The smallest plan that validates with any tools: one model step answering the goal."""
    instruction = goal[:MAX_INSTRUCTION_CHARS] or "Answer the goal."
    return {"steps": [{"name": "answer", "kind": "model", "instruction": instruction}]}


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
