"""The run a schedule submits: a `models.engine.submissions.RunRequest` kept on the schedule's row
(`goal` as a column, the rest as JSON in `request`), and checked when the schedule is made as a
submit would check it.

The check is the submit's own (`models.engine.runs.submit_run`: the goal, the facts, the success
criteria, the approval tightening, the replan check, each budget against the stack's ceilings),
run in a savepoint that is always rolled back, so a schedule cannot be made that no due time
could submit, and no second copy of those rules exists. The quota check comes last in
`submit_run`; a user over a quota now may still make a schedule (the quota is judged again at each
due time, `models.schedules.fires`). An explicit plan was checked against the registered tools
by the caller (`models.front.commands.checked_plan`); it is stored as the plan's JSON and read
back whole at each due time, as a submitted run's plan is never checked against the tools again.
"""

from __future__ import annotations

from typing import Any, Final

from sqlmodel import Session

from models.engine import submissions
from models.engine.runs import check_user_id
from models.engine.submissions import RunRequest
from models.errors import UserQuotaExceeded
from models.plans.plans import PlanSpec
from models.settings import Settings

BUDGETS: Final = ("replans", "tokens", "cost_usd", "wall_time_s")
# RunRequest's fields kept as JSON (user_id and goal are columns of their own).
KEPT: Final = (
    "facts",
    *BUDGETS,
    "success_criteria",
    "pin_from_goal",
    "replan_check",
    "approvals",
)


def stored(request: RunRequest) -> dict[str, Any]:
    """`request` as the schedule's `request` column: its fields but the user and goal, the plan
    as its JSON (None without one)."""
    kept = {name: getattr(request, name) for name in KEPT}
    kept["plan"] = None if request.plan is None else request.plan.model_dump(mode="json")
    return kept


def run_request(user_id: str, goal: str, kept: dict[str, Any]) -> RunRequest:
    """The `RunRequest` a schedule of `user_id` with `goal` and `request` column `kept` submits.
    Raises `pydantic.ValidationError` for a stored plan that no longer reads as a plan."""
    plan = kept.get("plan")
    fields = {name: kept[name] for name in KEPT if name in kept}
    spec = None if plan is None else PlanSpec.model_validate(plan)
    return RunRequest(user_id=user_id, goal=goal, plan=spec, **fields)


def check(session: Session, request: RunRequest, *, settings: Settings) -> None:
    """Raise what a submit of `request` now would raise for its content (`InvalidInput` naming
    the field), by running the submit's checks and insert in a savepoint rolled back whatever
    happens; a quota that refuses it now (`UserQuotaExceeded`) is not raised."""
    check_user_id(request.user_id)
    trial = session.begin_nested()
    try:
        submissions.insert(session, request, settings=settings)
    except UserQuotaExceeded:
        pass  # every check of the content passed before it
    finally:
        trial.rollback()
