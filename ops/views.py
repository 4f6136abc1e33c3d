"""Rich renderings of runs, steps and escalations for the CLI. Reads rows; changes nothing."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from sqlmodel import Session, col, select

from models.plans import current_steps
from models.runs import pinned_facts
from models.tables import Escalation, Run, Step, utcnow

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "running": "cyan",
    "queued": "yellow",
    "pending": "dim",
    "waiting_review": "magenta",
    "planning": "cyan",
    "replanning": "cyan",
    "synthesizing": "cyan",
    "open": "magenta",
    "claimed": "yellow",
    "decided": "green",
}
CELL_MAX_CHARS = 70


def styled(status: str) -> Text:
    """A status word in its colour."""
    return Text(status, style=STATUS_STYLE.get(status, ""))


def short(value: Any, limit: int = CELL_MAX_CHARS) -> str:
    """Compact JSON (or text) cut to `limit` characters."""
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def age(since: datetime | None) -> str:
    """`since` as a short age, e.g. `42s`, `3m`, `2h`."""
    if since is None:
        return "-"
    seconds = int((utcnow() - since).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def provider_label(provider: str) -> str:
    """The provider as shown to people; the offline one is always labelled as such."""
    return "offline (deterministic, no model)" if provider == "offline" else provider


def runs_table(runs: list[Run]) -> Table:
    """One line per run."""
    table = Table("run", "user", "status", "plan v", "replans", "tokens", "age", "goal")
    for r in runs:
        table.add_row(
            str(r.id),
            r.user_id,
            styled(r.status),
            str(r.plan_version),
            f"{r.replans_used}/{r.replans_limit}",
            f"{r.tokens_used}/{r.tokens_limit}",
            age(r.created_at),
            short(r.goal, 50),
        )
    return table


def steps_table(steps: list[Step]) -> Table:
    """The steps of a plan in order, with status, attempts and result or error."""
    table = Table("#", "step", "kind", "tool", "status", "try", "result / error")
    for i, s in enumerate(steps, start=1):
        outcome = s.error if s.status == "failed" else (s.result if s.result else "")
        table.add_row(
            str(i),
            s.name,
            s.kind,
            s.tool or "",
            styled(s.status),
            str(s.attempt),
            short(outcome or ""),
        )
    return table


def run_panel(session: Session, run: Run) -> RenderableType:
    """Everything about one run: budgets, pinned facts, the current plan, escalation, answer."""
    facts = pinned_facts(session, run.id or 0)
    head = Table.grid(padding=(0, 2))
    head.add_row("goal", run.goal)
    head.add_row("user", run.user_id)
    head.add_row("status", styled(run.status))
    head.add_row("provider", provider_label(run.provider))
    head.add_row("pinned facts", ", ".join(f"{k}={v}" for k, v in facts.items()) or "-")
    head.add_row(
        "spend",
        f"replans {run.replans_used}/{run.replans_limit}, tokens {run.tokens_used}/"
        f"{run.tokens_limit}, cost ${run.cost_used_usd:.4f}/${run.cost_limit_usd:.2f}",
    )
    parts: list[RenderableType] = [head, steps_table(current_steps(session, run))]
    esc = open_escalation(session, run.id or 0)
    if esc is not None:
        parts.append(Text(f"escalation {esc.id} ({esc.status}): {esc.reason}", style="magenta"))
    if run.error:
        parts.append(Text(f"error: {run.error}", style="red"))
    if run.final_result:
        parts.append(Text("answer: " + str(run.final_result.get("answer", ""))))
    title = f"run {run.id} · plan version {run.plan_version}"
    return Panel(Group(*parts), title=title, title_align="left")


def open_escalation(session: Session, run_id: int) -> Escalation | None:
    """The run's undecided escalation, if any."""
    return session.exec(
        select(Escalation).where(Escalation.run_id == run_id, Escalation.status != "decided")
    ).first()


def escalations_table(rows: list[Escalation]) -> Table:
    """The review queue, oldest first."""
    table = Table("id", "run", "reason", "step", "status", "claimed by", "waiting")
    for e in rows:
        table.add_row(
            str(e.id),
            str(e.run_id),
            e.reason,
            str(e.detail.get("step", "")),
            styled(e.status),
            e.claimed_by or "",
            age(e.created_at),
        )
    return table


def escalation_panel(session: Session, esc: Escalation) -> RenderableType:
    """Why the run escalated, the failing step and its error, the budget used, pinned facts."""
    run = session.get(Run, esc.run_id)
    step = session.get(Step, esc.step_id) if esc.step_id else None
    grid = Table.grid(padding=(0, 2))
    grid.add_row("reason", esc.reason)
    grid.add_row("status", styled(esc.status))
    if run is not None:
        grid.add_row("run", f"{run.id}: {run.goal} ({run.status})")
        grid.add_row("replans", f"{run.replans_used}/{run.replans_limit}")
        facts = pinned_facts(session, run.id or 0)
        grid.add_row("pinned facts", ", ".join(f"{k}={v}" for k, v in facts.items()) or "-")
    if step is not None:
        grid.add_row("failed step", f"{step.name} ({step.tool or step.kind}), {step.attempt} tries")
        grid.add_row("error", Text(step.error or "", style="red"))
    for key, value in esc.detail.items():
        if key not in ("step", "error", "tool", "replans"):
            grid.add_row(key, short(value, 400))
    if esc.decision:
        grid.add_row("decision", f"{esc.decision} by {esc.decided_by}: {esc.comment or ''}")
    return Panel(grid, title=f"escalation {esc.id}", title_align="left")


def review_queue(session: Session, include_decided: bool = False) -> list[Escalation]:
    """Escalations oldest first; undecided only unless `include_decided`."""
    stmt = select(Escalation).order_by(col(Escalation.created_at))
    if not include_decided:
        stmt = stmt.where(Escalation.status != "decided")
    return list(session.exec(stmt))
