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
from models.engine import budget_grants, children, stack_limits
from models.engine.runs import pinned_facts
from models.front import queries
from models.plans.layout import places, runs_together
from models.plans.plans import current_graph, handled_failures
from models.review import call_decisions, escalations, reasons
from models.review.drafts import starting_plan
from models.settings import get_settings
from models.tables import Escalation, Run, Step, utcnow

TABS: Final = ("open", "claimed", "mine", "decided")
DECIDED_SHOWN: Final = 50  # the decided tab lists the newest decisions only


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
    told = reasons.why(esc, failed)
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
        "call": call_decisions.call_view(session, esc),  # a gated tool call (issue 30)
        "run": run,
        "parent_run_id": children.parent_of(session, esc.run_id),  # a child run's (issue 32)
        "failed": failed,
        "error": told.error,
        "why": told.text,
        "extra": told.extra,
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
