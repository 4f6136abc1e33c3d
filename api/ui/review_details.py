"""What the console shows of the review queue: the inbox tabs and one escalation in full.

Reads rows only. Waiting time and time left use `models.reviews.waiting_s` and
`deadline_left_s`, the same as the CLI's queue.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from api.ui import run_details
from models import reviews
from models.plans import current_steps
from models.runs import pinned_facts
from models.states import STEP_NOT_STARTED
from models.tables import Escalation, Run, Step, utcnow
from ops.views import DETAIL_SHOWN_ELSEWHERE

TABS: Final = ("open", "claimed", "mine", "decided")
DECIDED_SHOWN: Final = 50  # the decided tab lists the newest decisions only
EXAMPLE_INSTRUCTION_MAX_CHARS: Final = 4000  # StepSpec.instruction's limit (models.plans)
PLAN_NOTE_REMAINING: Final = (
    "The failed step and every step not yet run: these replace every step that has not run yet."
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

# Why a run escalated, in a reviewer's words; an unlisted reason is shown as its code.
REASON_TEXT: Final = {
    "replan_budget_spent": "A step failed and the run has no replans left in its budget.",
    "token_budget_spent": "The run spent its token budget.",
    "cost_budget_spent": "The run spent its cost budget.",
    "wall_time_budget_spent": "The run ran out of wall time.",
    "budget_spent": "The run spent a budget.",
    "quota_exhausted": "The model provider's account has no quota left.",
    "rate_limited": "The model provider kept refusing requests (rate limited).",
    "context_overflow": "The step's context does not fit the model's context window.",
    "invalid_plan": "The planner did not produce a valid plan.",
    "synthesis_failed": "The final answer could not be written.",
}


@dataclass(frozen=True)
class InboxItem:
    """One row of the inbox: the escalation, its run, how long it has waited and has left."""

    escalation: Escalation
    run: Run | None
    waiting_s: float
    left_s: float | None


def _tab_filter(tab: str, me: int) -> list[Any]:
    if tab == "mine":  # claims belong to tokens, not names (issue 9)
        return [col(Escalation.status) == "claimed", col(Escalation.claimed_by_token_id) == me]
    return [col(Escalation.status) == tab]


def inbox(session: Session, *, tab: str, me: int, now: datetime | None = None) -> list[InboxItem]:
    """The escalations of `tab` (`TABS`; `mine` is those the token `me` has claimed), oldest
    first; the newest `DECIDED_SHOWN` decisions for `decided`."""
    stmt = select(Escalation).where(*_tab_filter(tab, me))
    if tab == "decided":
        stmt = stmt.order_by(col(Escalation.decided_at).desc()).limit(DECIDED_SHOWN)
    else:
        stmt = stmt.order_by(col(Escalation.created_at))
    rows = list(session.exec(stmt))
    run_ids = {e.run_id for e in rows}
    runs = {r.id: r for r in session.exec(select(Run).where(col(Run.id).in_(run_ids)))}
    at = now or utcnow()
    return [
        InboxItem(e, runs.get(e.run_id), reviews.waiting_s(e, at), reviews.deadline_left_s(e, at))
        for e in rows
    ]


def tab_counts(session: Session, *, me: int) -> dict[str, int]:
    """How many escalations each tab holds (`decided`: all of them)."""
    by_status = dict(
        session.exec(
            select(Escalation.status, sa.func.count()).group_by(col(Escalation.status))
        ).all()
    )
    mine = session.scalar(
        sa.select(sa.func.count()).select_from(Escalation).where(*_tab_filter("mine", me))
    )
    return {tab: int(by_status.get(tab, 0)) for tab in TABS} | {"mine": int(mine or 0)}


@dataclass(frozen=True)
class StartingPlan:
    """The edit form's starting text, and a line above the box saying what it is."""

    text: str
    note: str


def starting_plan(
    esc: Escalation, run: Run | None, steps: list[Step], failed: Step | None
) -> StartingPlan:
    """The failed step (to fix) and every step not yet run, as the plan JSON `agentq review
    edit --plan` takes. With none (the planner's output never validated, so the run has no
    plan): the planner's raw output when it is JSON, else a minimal plan that validates."""
    todo = [s for s in steps if s.status in STEP_NOT_STARTED]
    if failed is not None and failed.status == "failed":
        todo = [failed, *todo]
    if todo:
        return StartingPlan(_dumps({"steps": [_spec(s) for s in todo]}), PLAN_NOTE_REMAINING)
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
    instruction = goal[:EXAMPLE_INSTRUCTION_MAX_CHARS] or "Answer the goal."
    return {"steps": [{"name": "answer", "kind": "model", "instruction": instruction}]}


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _spec(step: Step) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": step.name, "instruction": step.instruction}
    spec["kind"] = "model" if step.kind == "model" else "tool"
    if step.tool:
        spec["tool"] = step.tool
    spec["args"] = step.args
    if step.tools:
        spec["tools"] = step.tools
    return spec


def escalation_context(session: Session, escalation_id: int) -> dict[str, Any]:
    """Everything the review page shows: why, the failing step and its error, the budget used,
    pinned facts, the current plan, the decision, and the edit form's starting plan. Raises
    `NotFound`."""
    esc = reviews.get_escalation(session, escalation_id)
    run = session.get(Run, esc.run_id)
    failed = session.get(Step, esc.step_id) if esc.step_id else None
    steps = current_steps(session, run) if run is not None else []
    now = utcnow()
    return {
        "esc": esc,
        "run": run,
        "failed": failed,
        "error": (failed.error if failed is not None else None) or esc.detail.get("error"),
        "why": REASON_TEXT.get(esc.reason, esc.reason),
        "extra": {
            k: v
            for k, v in esc.detail.items()
            if k not in DETAIL_SHOWN_ELSEWHERE and v not in ("", None, {}, [])
        },
        "facts": pinned_facts(session, esc.run_id),
        "steps": steps,
        "meters": run_details.spend(run, now) if run is not None else [],
        "waiting_s": reviews.waiting_s(esc, now),
        "left_s": reviews.deadline_left_s(esc, now),
        "start": starting_plan(esc, run, steps, failed),
    }
