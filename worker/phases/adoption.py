"""A plan that adopts a recalled procedure's plan template by reference (issue 12, item 7).

A plan or replan call whose context carries procedures with a plan template
(`worker.phases.procedure_context`) may answer `{"procedure": ID}` instead of writing steps: the
plan is then that template, checked as any plan is (`models.plans.plans.parse_plan`). A small model
copies an id far more reliably than it writes a five-step plan with references (SmolLM2-135M wrote
no usable plan for the demo; adopting, it filed the report in 5 runs of 5: README). The request's
schema offers the ids as an enum beside the plan's own shape (`schema`), so a server that
compiles schemas into a grammar can only answer an id the context showed, or a plan. Both
answers open with the `procedure` key (an id, or null before the steps of a plan written out),
so a grammar-bound model makes the choice at the first token of its answer, where the ids it
was shown weigh most: offered the same two answers as alternatives that differ in their first
key, SmolLM2 wrote steps (in the run tried).

In a replan, a template step whose name the plan already has (a step kept from the current
version) is left out, so adopting a whole-plan template fills in only what the plan lacks: the
failed step's place. The steps are written by the writer of the procedures the call carried
(`author`): a reviewer's template, adopted or followed, makes a reviewer's plan version. A
template that would call the failed step's tool again with the same arguments is not offered
(the replan's own rule: never repeat a known failure).
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

from models.errors import InvalidPlan
from models.memory.procedure_learning import template_applies
from models.review.authorship import USER_WRITERS
from models.storable import parse_json

KEY: Final = "procedure"
ADOPT_NOTE: Final = (
    'To follow this procedure\'s plan template as it is, answer {"procedure": %d}; to write '
    'the steps yourself, answer {"procedure": null, "steps": [...]}.'
)
PLANNING: Final = ("plan", "replan")


def offered(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The procedures of `payload` (`worker.memory.working_memory.build`'s `procedures`) a plan may
    adopt: those with a plan template that applies to the goal (`payload["goal"]`: a learned one's
    only to the goal it was learned for, `models.memory.procedure_learning.template_applies`),
    less (in a replan: `payload["failed_step"]`) those whose step of the failed step's name calls
    its tool with its arguments again."""
    failed, goal = payload.get("failed_step") or {}, str(payload.get("goal") or "")
    return [
        p
        for p in payload.get("procedures") or []
        if template_applies(str(p.get("title") or ""), str(p.get("origin") or ""), goal)
        and adoptable(p.get("plan_template"), failed)
    ]


def adoptable(template: Mapping[str, Any] | None, failed: Mapping[str, Any] | None) -> bool:
    """Whether a plan may adopt `template` (a plan template, or None) in place of `failed` (a
    replan's failed step as its prompt shows it, `worker.model_calls.prompts.replan_prompt`; None in
    a first plan)."""
    steps = (template or {}).get("steps") or []
    return bool(steps) and not _repeats(steps, failed or {})


def _repeats(steps: Sequence[Mapping[str, Any]], failed: Mapping[str, Any]) -> bool:
    if not failed.get("tool") or failed.get("result") is not None:  # a model step, or no failure
        return False
    same = [s for s in steps if s.get("name") == failed.get("name")]
    return any(
        s.get("tool") == failed["tool"] and (s.get("args") or {}) == (failed.get("args") or {})
        for s in same
    )


def schema(
    purpose: str, plan: dict[str, Any] | None, payload: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The answer schema of a call of `purpose` whose request carries `payload`: in a plan or
    replan call that offers procedures (`offered`), `{"procedure": one of their ids}` or `plan`
    (the plan's own schema, `worker.model_calls.prompts.plan_schema`) led by `"procedure": null`;
    else `plan` unchanged."""
    ids = [p["id"] for p in offered(payload)] if purpose in PLANNING else []
    if plan is None or not ids:
        return plan
    adopt = {
        "type": "object",
        "additionalProperties": False,
        "required": [KEY],
        "properties": {KEY: {"type": "integer", "enum": list(ids)}},
    }
    written = {
        **plan,
        "required": [KEY, *plan.get("required", [])],
        "properties": {KEY: {"type": "null"}, **plan.get("properties", {})},
    }
    return {"anyOf": [adopt, written]}


def _written(text: str) -> Any:
    try:
        data = parse_json(text)
    except ValueError:
        return text  # parse_plan says what is wrong with it
    if isinstance(data, dict) and KEY in data and data[KEY] is None:
        return {k: v for k, v in data.items() if k != KEY}
    return text


def adopted_id(text: str) -> int | None:
    """The procedure id an answer adopts, or None when it is not `{"procedure": ID}`."""
    try:
        data = parse_json(text)
    except ValueError:
        return None
    if isinstance(data, dict) and set(data) == {KEY} and type(data[KEY]) is int:
        return int(data[KEY])
    return None


def author(payload: Mapping[str, Any], *, default: str) -> str:
    """Who the steps a plan call answered are written by, as `PlanVersion.created_by`, from
    the call's `payload`: `reviewer` when its context carried a procedure whose version a
    reviewer wrote, or a writer whose role is unknown (`written_as` not in
    `models.review.authorship.USER_WRITERS`), whether the answer adopts its template or writes steps
    after its how-to: the steps then act with a reviewer's rights (issue 27); else `default`
    (`planner`, `replanner`)."""
    carried = payload.get("procedures") or []
    if any(p.get("written_as") not in USER_WRITERS for p in carried):
        return "reviewer"
    return default


def expand(text: str, payload: Mapping[str, Any], *, kept: Collection[str]) -> Any:
    """The plan an answer stands for: an adopted procedure's template (less the steps named in
    `kept`, the steps the plan keeps); a plan written out (less its `"procedure": null`); else
    the answer itself. Raises `InvalidPlan` for an id that was not offered, and when a template
    leaves nothing to add."""
    procedure_id = adopted_id(text)
    if procedure_id is None:
        return _written(text)
    by_id = {p["id"]: p for p in offered(payload)}
    if procedure_id not in by_id:
        ids = ", ".join(str(i) for i in by_id) or "none"
        raise InvalidPlan(f"procedure: {procedure_id} is not a procedure offered here ({ids})")
    template = by_id[procedure_id]["plan_template"]
    steps = [s for s in template["steps"] if s.get("name") not in kept]
    if not steps:
        raise InvalidPlan(f"procedure: {procedure_id}'s steps are all in the plan already")
    plan = {**template, "steps": steps}
    if kept:  # a replan's steps: the criteria are the run's already
        plan.pop("success_criteria", None)
    return copy.deepcopy(plan)
