"""What the console shows of the review queue: the inbox tabs and one escalation in full.

Reads rows only. Waiting time and time left use `models.review.escalations.waiting_s` and
`deadline_left_s`, the same as the CLI's queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlmodel import Session

from api.ui import run_details
from models.engine import budget_grants, stack_limits
from models.engine.runs import pinned_facts
from models.formats import DETAIL_SHOWN_ELSEWHERE
from models.front import queries
from models.plans.layout import places, runs_together
from models.plans.plans import current_graph, handled_failures
from models.review import escalations
from models.review.drafts import starting_plan
from models.settings import get_settings
from models.tables import Escalation, Run, Step, utcnow

TABS: Final = ("open", "claimed", "mine", "decided")
DECIDED_SHOWN: Final = 50  # the decided tab lists the newest decisions only

# Why a run escalated, in a reviewer's words; an unlisted reason is shown as its code.
REASON_TEXT: Final = {
    "replan_budget_spent": "A step failed and the run has no replans left in its budget.",
    "token_budget_spent": "The run spent its token budget.",
    "cost_budget_spent": "The run spent its cost budget.",
    "wall_time_budget_spent": "The run ran out of wall time.",
    "step_data_budget_spent": "A step's result does not fit the run's step-data budget: it was "
    "not stored. Approve grants the budget once more; edit asks for less data.",
    "user_step_data_spent": "A step's result does not fit what its user's runs may store "
    "together: it was not stored. Purged or erased runs give theirs back.",
    "budget_spent": "The run spent a budget.",
    "quota_exhausted": "The model provider's account has no quota left.",
    "rate_limited": "The model provider kept refusing requests (rate limited).",
    "context_overflow": "The step's context does not fit the model's context window.",
    "invalid_plan": "The planner did not produce a valid plan.",
    "synthesis_failed": "The final answer could not be written.",
    "goal_not_met": "The steps finished, but what the run delivered fails its goal check, and "
    "no replan is left: approve accepts it as it is; edit replaces the step that delivered it.",
    "invalid_goal_check": "The goal check's answer never validated.",
    "internal_error": "agentq itself failed while planning or answering; see the worker log.",
}


@dataclass(frozen=True)
class InboxItem:
    """One row of the inbox: the escalation, its run, how long it has waited and has left."""

    escalation: Escalation
    run: Run | None
    waiting_s: float
    left_s: float | None


def inbox(session: Session, *, tab: str, me: int, now: datetime | None = None) -> list[InboxItem]:
    """The escalations of `tab` (`TABS`; `mine` is those the token `me` has claimed), oldest
    first; the newest `DECIDED_SHOWN` decisions for `decided`."""
    rows = queries.inbox(session, tab=tab, me=me, decided_limit=DECIDED_SHOWN)
    runs = queries.runs_by_id(session, {e.run_id for e in rows})
    at = now or utcnow()
    return [
        InboxItem(
            e, runs.get(e.run_id), escalations.waiting_s(e, at), escalations.deadline_left_s(e, at)
        )
        for e in rows
    ]


def tab_counts(session: Session, *, me: int) -> dict[str, int]:
    """How many escalations each tab holds (`decided`: all of them)."""
    counts = queries.inbox_counts(session, me=me)
    return {tab: counts.get(tab, 0) for tab in TABS} | {"mine": counts["mine"]}


def escalation_context(session: Session, escalation_id: int) -> dict[str, Any]:
    """Everything the review page shows: why, the failing step and its error, the budget used
    (and the spent budget approve would grant: `budget`, a `models.engine.budget_grants.Standing`),
    pinned facts, the current plan with each step's wave and dependencies (`places`, by step
    id), the decision, and the edit form's starting plan (`models.review.drafts`). Raises
    `NotFound`."""
    esc = escalations.get_escalation(session, escalation_id)
    run = session.get(Run, esc.run_id)
    failed = session.get(Step, esc.step_id) if esc.step_id else None
    graph = current_graph(session, run) if run is not None else None
    steps = list(graph.kept) if graph is not None else []
    after = (graph.after if graph is not None else None) or {}
    found = places([s.id or 0 for s in steps], after, {s.id or 0: s.name for s in steps})
    now = utcnow()
    budget = None
    if run is not None and esc.status != "decided":
        limits = stack_limits.effective(session, get_settings())
        budget = budget_grants.spent(session, esc, run, settings=limits, now=now)
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
        "places": found,
        "together": runs_together(found),
        "meters": run_details.spend(run, now) if run is not None else [],
        "budget": budget,
        "granted": budget_grants.describe(esc.granted or {}),
        "waiting_s": escalations.waiting_s(esc, now),
        "left_s": escalations.deadline_left_s(esc, now),
        "start": starting_plan(
            esc, run, steps, failed, after, answered=handled_failures(session, esc.run_id)
        ),
    }
