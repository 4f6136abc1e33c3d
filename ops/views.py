"""Rich renderings of runs, steps and escalations for the CLI. Reads rows; changes nothing.

Every value that comes from a user or the database goes into a `rich.text.Text`, never into a
markup string: a goal like `fix the [bold] tag [/]` is shown as typed instead of being parsed as
Rich markup (which mangles it, or raises `MarkupError` for every later `agentq run list`). It passes
`models.display.visible` first (`literal`, `cell`), as in the web console: a bidirectional
override or an invisible character is shown as `⟨U+202E⟩`, and a terminal escape as
`⟨U+001B⟩`, instead of reordering or hiding what follows (issue 9). The
`render_*` functions are pure (rows in, renderable out); the `*_panel` functions read what they
need with the session first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Column, Table
from rich.text import Text
from sqlmodel import Session

from models.display import visible
from models.engine import budget_grants, stack_limits
from models.engine.budget_grants import Standing
from models.engine.runs import pinned_facts
from models.formats import (
    CELL_MAX_CHARS,
    DETAIL_SHOWN_ELSEWHERE,
    age,
    compact,
    provider_label,
    short,
    span,
    utc,
)
from models.front import queries
from models.memory.procedure_admin import SAVE_HINT, offers_procedure
from models.memory.procedure_recall import Used, used_by_run
from models.plans.goal_values import GoalPins
from models.plans.graph import linear
from models.plans.layout import after_text, places, runs_together
from models.plans.plans import current_graph
from models.review.escalations import deadline_left_s, waiting_s
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run, Step, utcnow
from ops.budget_views import budget_text, spent_text

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "running": "cyan",
    "queued": "yellow",
    "ready": "yellow",
    "pending": "dim",
    "waiting_review": "magenta",
    "planning": "cyan",
    "replanning": "cyan",
    "synthesizing": "cyan",
    "open": "magenta",
    "claimed": "yellow",
    "decided": "green",
}
DETAIL_MAX_CHARS = 400
USER_MAX_WIDTH = 12  # columns; a long user name is cut with an ellipsis in the runs table


def styled(status: str) -> Text:
    """A status word in its colour."""
    return Text(status, style=STATUS_STYLE.get(status, ""))


def literal(value: str, style: str = "") -> Text:
    """`value` as literal text: brackets are shown, not parsed as markup, and invisible or
    direction-changing characters as `⟨U+XXXX⟩` (`models.display.visible`)."""
    return Text(visible(value), style=style)


def cell(value: Any, limit: int = CELL_MAX_CHARS, style: str = "") -> Text:
    """`short(value, limit)` as `literal` text."""
    return literal(short(value, limit), style=style)


def runs_table(runs: list[Run]) -> Table:
    """One line per run. Only the user and goal columns wrap, so a status such as
    `waiting_review` stays whole in an 80-column terminal (the plan version is in `run show`)."""
    table = Table("run", Column("user", max_width=USER_MAX_WIDTH))
    for header in ("status", "replans", "tokens", "age"):
        table.add_column(header, no_wrap=True)
    table.add_column("goal")
    for r in runs:
        table.add_row(
            str(r.id),
            cell(r.user_id, 40),
            styled(r.status),
            f"{r.replans_used}/{r.replans_limit}",
            f"{compact(r.tokens_used)}/{compact(r.tokens_limit)}",
            age(r.created_at),
            cell(r.goal, 50),
        )
    return table


def steps_table(steps: list[Step], after: Mapping[int, Iterable[int]] | None = None) -> Table:
    """The steps of a plan in order, with their wave and what each waits for (`after`, by id:
    `models.plans.plans.dependencies`; None: a plain list, each step after the one before), status,
    attempts and result or error. `tool` is the tool, or the kind of a step that calls none.
    Steps of one wave can run together; the caption says so when two share one."""
    ids = [s.id or 0 for s in steps]
    names = {s.id or 0: s.name for s in steps}
    found = places(ids, linear(ids) if after is None else after, names)
    together = "steps of one wave can run together" if runs_together(found) else None
    table = Table("#", Column("wave", justify="right"), "step", "after", caption=together)
    for header in ("tool", "status", "try", "result / error"):
        table.add_column(header)
    for i, s in enumerate(steps, start=1):
        outcome = s.error if s.status == "failed" else (s.result if s.result else "")
        place = found[s.id or 0]
        table.add_row(
            str(i),
            str(place.wave),
            literal(s.name),
            literal(after_text(place.after)),
            literal(s.tool or s.kind),
            styled(s.status),
            str(s.attempt),
            cell(outcome or ""),
        )
    return table


def wall_time(run: Run) -> Text:
    """The wall-time budget and the deadline (UTC), with the time left while the run is live."""
    text = f"{run.wall_time_limit_s:g} s"
    if run.deadline_at is not None:
        text += f", deadline {utc(run.deadline_at)}"
        if run.status not in RUN_TERMINAL:
            left_s = (run.deadline_at - utcnow()).total_seconds()
            text += f" (in {span(left_s)})" if left_s >= 0 else f" (passed {span(-left_s)} ago)"
    return Text(text)


def facts_text(facts: dict[str, str]) -> Text:
    """Pinned facts as `k=v, k=v`, or `-`."""
    return literal(", ".join(f"{k}={v}" for k, v in facts.items()) or "-")


def goal_values_text(pins: GoalPins, *, asked: bool) -> Text | None:
    """What `agentq run submit` says of the values its goal states (`models.plans.goal_values`):
    those pinned, those an explicit `--fact` overrode, or (not `asked`) what `--pin-from-goal` would
    pin; None when the goal states none."""
    if not pins.found:
        return None
    if not asked:
        line = f"the goal states {_pairs(pins.found)}; --pin-from-goal pins them"
        return literal(line, style="dim")
    lines = [f"pinned from the goal: {_pairs(pins.pinned) or 'nothing new'}"]
    if pins.overridden:
        lines.append(f"your --fact won over the goal's {_pairs(pins.overridden)}")
    return literal("\n".join(lines))


def _pairs(facts: Mapping[str, str]) -> str:
    return " ".join(f"{k}={v}" for k, v in facts.items())


def render_run(
    run: Run,
    *,
    facts: dict[str, str],
    steps: list[Step],
    escalation: Escalation | None,
    after: Mapping[int, Iterable[int]] | None = None,
    procedures: Iterable[Used] = (),
    offer_procedure: bool = False,
) -> RenderableType:
    """Everything about one run: budgets, pinned facts, the current plan (`steps` in order,
    `after` what each waits for, as `steps_table` takes), the procedures its plans used,
    escalation, answer, and with `offer_procedure` the command that saves its plan as one."""
    head = Table.grid(padding=(0, 2))
    head.add_row("goal", literal(run.goal))
    head.add_row("user", literal(run.user_id))
    head.add_row("status", styled(run.status))
    head.add_row("provider", Text(provider_label(run.provider)))
    head.add_row("pinned facts", facts_text(facts))
    if run.success_criteria:
        criteria = "\n".join(f"{c['text']} ({c['by']})" for c in run.success_criteria)
        head.add_row("success criteria", literal(criteria))
    if run.replan_check != "off":
        head.add_row("replan check", Text(f"{run.replan_check}: after each step that succeeds"))
    head.add_row(
        "spend",
        Text(
            f"replans {run.replans_used}/{run.replans_limit}, tokens {run.tokens_used}/"
            f"{run.tokens_limit}, cost ${run.cost_used_usd:.4f}/${run.cost_limit_usd:.2f}, "
            f"step data {run.step_data_bytes:,}/{run.step_data_limit_bytes:,} bytes"
        ),
    )
    head.add_row("wall time", wall_time(run))
    parts: list[RenderableType] = [head, steps_table(steps, after)]
    if escalation is not None:
        parts.append(
            literal(
                f"escalation {escalation.id} ({escalation.status}): {escalation.reason}",
                style="magenta",
            )
        )
    if run.error:
        parts.append(literal(f"error: {run.error}", style="red"))
    if run.final_result:
        parts.append(literal("answer: " + str(run.final_result.get("answer", ""))))
    parts += [procedures_text(procedures)] if procedures else []
    if offer_procedure:
        hint = "succeeded after a reviewer's edit: save its plan as a procedure with "
        parts.append(literal(hint + SAVE_HINT.format(run_id=run.id), style="cyan"))
    title = f"run {run.id} · plan version {run.plan_version}"
    return Panel(Group(*parts), title=title, title_align="left")


def run_panel(session: Session, run: Run) -> RenderableType:
    """`render_run` for `run`, with its pinned facts, current plan and open escalation."""
    graph = current_graph(session, run)
    return render_run(
        run,
        facts=pinned_facts(session, run.id or 0),
        steps=list(graph.kept),
        escalation=queries.open_escalation(session, run.id or 0),
        after=graph.after or {},
        procedures=used_by_run(session, run.id or 0),
        offer_procedure=offers_procedure(session, run),
    )


def procedures_text(used: Iterable[Used]) -> Text:
    """The procedures a run's plans used: `procedures used: #7 v2 "title" (user) adopted in plan
    v1` (`shown` for one the context carried that the plan did not adopt)."""
    lines = [
        f'#{u.id} v{u.version} "{u.title}" ({u.scope}) '
        f"{'adopted' if u.adopted else 'shown'} in {u.purpose} v{u.plan_version}"
        for u in used
    ]
    return literal("procedures used: " + "; ".join(lines))


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
) -> RenderableType:
    """Why the run escalated, the failing step and its error (or the stored error when no step
    failed), the budget used (and the spent `budget`: what approve would set), pinned facts,
    and the decision once there is one."""
    grid = Table.grid(padding=(0, 2))
    grid.add_row("reason", literal(esc.reason))
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
        grid.add_row("replans", f"{run.replans_used}/{run.replans_limit}")
        grid.add_row("pinned facts", facts_text(facts))
    if budget is not None:
        grid.add_row("budget", literal(budget_text(budget), style="magenta"))
    if step is not None:
        grid.add_row(
            "failed step", literal(f"{step.name} ({step.tool or step.kind}), {step.attempt} tries")
        )
    error = (step.error if step is not None else None) or esc.detail.get("error")
    if error:
        grid.add_row("error", cell(error, DETAIL_MAX_CHARS, style="red"))
    for key, value in esc.detail.items():
        if key not in DETAIL_SHOWN_ELSEWHERE and value not in ("", None, {}, []):
            grid.add_row(literal(key), cell(value, DETAIL_MAX_CHARS))
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
    )


def said(notified: bool, done: str) -> RenderableType:
    """`done`, as printed after a command; when its messages were not `notified` the broker is
    down, the rows are safe in Postgres and the reconciler sends them once the broker is back:
    said (in yellow), not an error."""
    if notified:
        return done
    return Text(
        f"{done}; the broker could not be reached — the reconciler will send it when it is back",
        style="yellow",
    )
