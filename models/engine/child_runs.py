"""Starting a child run for a step of kind `run` (`models.engine.children` has the whole story):
in the transaction that ends the step's attempt, under its parent's lock."""

from __future__ import annotations

from typing import Any, Final

from sqlmodel import Session, func, select

from models.approvals.calls import run_policy
from models.engine import events, submissions
from models.engine.children import RunChild, depth_of
from models.engine.dispatch import Send
from models.engine.runs import pinned_facts
from models.engine.submissions import RunRequest
from models.errors import InvalidInput, InvalidPlan, UserQuotaExceeded
from models.settings import Settings
from models.tables import Run, Step, utcnow

DEPTH_SETTING: Final = "AGENTQ_CHILD_RUN_MAX_DEPTH"
FAN_OUT_SETTING: Final = "AGENTQ_CHILD_RUNS_MAX"


class ChildRunRefused(Exception):
    """A step of kind `run` cannot start its child (too deep, too many, its facts or goal
    invalid, a quota): the step fails with this message, and nothing of the child is written."""


def start(
    session: Session,
    parent: Run,
    step: Step,
    *,
    facts: dict[str, str],
    settings: Settings,
) -> tuple[int, list[Send]]:
    """Submit the child run of `step` (of kind `run`, of the locked run `parent`) in the caller's
    transaction (`models.engine.submissions.insert_and_decide`, in a savepoint): its goal the
    step's instruction (its planner writes its plan), the parent's facts with `facts` over them,
    the parent's remaining budgets. Returns the child's id and its first messages. Raises
    `ChildRunRefused` naming the setting or the field, and then nothing is written."""
    run_id = parent.id or 0
    depth = depth_of(session, run_id) + 1
    if depth > settings.child_run_max_depth:
        raise ChildRunRefused(
            f"step {step.name!r}: a child run would be at depth {depth}, over "
            f"{DEPTH_SETTING} ({settings.child_run_max_depth})"
        )
    started = session.exec(
        select(func.count()).select_from(RunChild).where(RunChild.parent_run_id == run_id)
    ).one()
    if started >= settings.child_runs_max:
        raise ChildRunRefused(
            f"step {step.name!r}: run {run_id} has started {started} child runs, the most "
            f"{FAN_OUT_SETTING} allows"
        )
    given = {**pinned_facts(session, run_id), **facts}
    try:
        request = RunRequest(
            user_id=parent.user_id,
            goal=step.instruction,
            facts=given,
            **_remaining(parent),
            replan_check=parent.replan_check,
            approvals=run_policy(session, run_id),
        )
        with session.begin_nested():  # a refusal leaves nothing of the child behind

            def link(session: Session, child: Run) -> None:
                session.add(
                    RunChild(
                        run_id=child.id or 0,
                        parent_run_id=run_id,
                        parent_step_id=step.id or 0,
                        depth=depth,
                    )
                )

            child, sends = submissions.insert_and_decide(
                session, request, settings=settings, then=link
            )
    except (InvalidInput, InvalidPlan, UserQuotaExceeded) as exc:
        raise ChildRunRefused(f"step {step.name!r}: its child run: {exc}") from exc
    events.record_event(
        session, run_id, "step.child_started", step_id=step.id, child_run_id=child.id
    )
    return child.id or 0, sends


def _remaining(parent: Run) -> dict[str, Any]:
    """What the parent has left of its budgets, as the child's (each at least the least a run
    may have: a parent with nothing left gets a child that escalates at once for it)."""
    left_s = (parent.deadline_at - utcnow()).total_seconds() if parent.deadline_at else None
    return {
        "replans": max(0, parent.replans_limit - parent.replans_used),
        "tokens": max(1, parent.tokens_limit - parent.tokens_used),
        "cost_usd": max(0.0, parent.cost_limit_usd - parent.cost_used_usd),
        "wall_time_s": max(1.0, left_s) if left_s is not None else None,
    }
