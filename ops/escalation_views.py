"""Rich renderings of the review queue for the CLI (`agentq review list|show|claim`, the demo):
the queue, one escalation in full, and what `review claim` says when there is none to claim.
Reads rows; changes nothing. User text goes through `ops.views.literal` and `cell`, as there; an
escalation's reason and detail are told as `run show` tells them (`ops.views.why_rows`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from rich.console import RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from sqlmodel import Session

from models.engine import budget_grants, lineage, stack_limits
from models.engine.budget_grants import Standing
from models.engine.runs import pinned_facts
from models.formats import span, utc
from models.review import reasons
from models.review.escalations import deadline_left_s, waiting_s
from models.settings import get_settings
from models.tables import Escalation, Run, Step, utcnow
from ops.budget_views import budget_text, spent_text
from ops.views import DETAIL_MAX_CHARS, cell, facts_text, literal, styled, why_rows


def deadline_left(esc: Escalation, now: datetime | None = None) -> Text:
    """Time left before the escalation's deadline (`in 3h`), or since it passed (`passed 2h
    ago`, red); `-` once decided or without a deadline."""
    left_s = deadline_left_s(esc, now or utcnow())
    if left_s is None:
        return Text("-")
    if left_s >= 0:
        return Text(f"in {span(left_s)}")
    return Text(f"passed {span(-left_s)} ago", style="red")


def escalations_table(
    rows: list[Escalation],
    now: datetime | None = None,
    budgets: Mapping[int, Standing] | None = None,
) -> Table:
    """The review queue, oldest first; `waiting` stops at the decision for decided ones, and
    `deadline` is the time left before the escalation's deadline. A spent budget in `budgets`
    (by escalation id) shows in `reason` as `tokens 512/500`: spent of its limit."""
    now, budgets = now or utcnow(), budgets or {}
    table = Table()
    headers = ("id", "run", "reason", "step", "status", "claimed by", "waiting", "deadline")
    for header in headers:
        table.add_column(header, no_wrap=header not in ("step", "claimed by"))
    for e in rows:
        spent = budgets.get(e.id or 0)
        table.add_row(
            str(e.id),
            str(e.run_id),
            literal(e.reason + (spent_text(spent) if spent is not None else "")),
            cell(e.detail.get("step", ""), 40),
            styled(e.status),
            literal(e.claimed_by or ""),
            span(waiting_s(e, now)),
            deadline_left(e, now),
        )
    return table


def nothing_to_claim(claims: dict[str, int]) -> Text:
    """What `review claim` says when it finds no open escalation: the queue is empty, or every
    undecided escalation is claimed, by whom, and how to free a claim whose reviewer is gone."""
    if not claims:
        return Text("the review queue is empty")
    holders = ", ".join(f"{reviewer} ({n})" for reviewer, n in claims.items())
    total = sum(claims.values())
    return literal(
        f"no open escalation to claim: {total} claimed by {holders}; a claim whose reviewer is "
        "gone can be freed with `agentq review release ID --force`"
    )


def render_escalation(
    esc: Escalation,
    *,
    run: Run | None,
    step: Step | None,
    facts: dict[str, str],
    budget: Standing | None = None,
    lineage: str | None = None,
) -> RenderableType:
    """Why the run escalated, the failing step and its error (or the stored error when no step
    failed), the budget used (and the spent `budget`: what approve would set), pinned facts,
    the run's relatives (`lineage`, `models.engine.lineage.Lineage.text`), and the
    decision once there is one."""
    grid = Table.grid(padding=(0, 2))
    told = reasons.why(esc, step)
    grid.add_row("reason", literal(told.summary))
    grid.add_row("status", styled(esc.status))
    if esc.claimed_by and esc.status == "claimed":
        grid.add_row("claimed by", literal(esc.claimed_by))
    now = utcnow()
    grid.add_row("waiting", Text(f"{span(waiting_s(esc, now))} (opened {utc(esc.created_at)})"))
    if esc.deadline_at is not None and esc.status != "decided":
        due = Text.assemble(f"{utc(esc.deadline_at)} (", deadline_left(esc, now), ")")
        grid.add_row("deadline", due)
    if run is not None:
        grid.add_row("run", literal(f"{run.id}: {run.goal} ({run.status})"))
        if lineage:
            grid.add_row("lineage", literal(lineage))
        grid.add_row("replans", f"{run.replans_used}/{run.replans_limit}")
        grid.add_row("pinned facts", facts_text(facts))
    if budget is not None:
        grid.add_row("budget", literal(budget_text(budget), style="magenta"))
    if step is not None:
        grid.add_row(
            "failed step", literal(f"{step.name} ({step.tool or step.kind}), {step.attempt} tries")
        )
    for label, row in why_rows(told):
        grid.add_row(label, row)
    for label, row in decision_rows(esc):
        grid.add_row(label, row)
    return Panel(grid, title=f"escalation {esc.id}", title_align="left")


def decision_rows(esc: Escalation) -> list[tuple[str, Text]]:
    """`decision`, `answer` and `comment` rows of a decided escalation; [] before that."""
    if not esc.decision:
        return []
    when = f" at {utc(esc.decided_at)}" if esc.decided_at else ""
    rows = [("decision", literal(f"{esc.decision} by {esc.decided_by}{when}"))]
    if esc.granted:
        rows.append(("budgets set", literal(budget_grants.describe(esc.granted))))
    if esc.answer is not None:
        rows.append(("answer", cell(esc.answer, DETAIL_MAX_CHARS)))
    if esc.comment:
        rows.append(("comment", cell(esc.comment, DETAIL_MAX_CHARS)))
    return rows


def escalation_panel(session: Session, esc: Escalation) -> RenderableType:
    """`render_escalation` for `esc`, with its run, failed step and the run's pinned facts."""
    run = session.get(Run, esc.run_id)
    budget = None
    if run is not None and esc.status != "decided":
        limits = stack_limits.effective(session, get_settings())
        budget = budget_grants.spent(session, esc, run, settings=limits, now=utcnow())
    return render_escalation(
        esc,
        run=run,
        step=session.get(Step, esc.step_id) if esc.step_id else None,
        facts=pinned_facts(session, esc.run_id) if run is not None else {},
        budget=budget,
        lineage=lineage.read(session, esc.run_id).text(),
    )
