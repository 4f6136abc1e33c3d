"""Rich renderings of runs and steps for the CLI (the review queue's: `ops.escalation_views`).
Reads rows; changes nothing.

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

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Column, Table
from rich.text import Text
from sqlmodel import Session

from models.display import visible
from models.engine import lineage
from models.engine.goal_reports import GoalReport, report, report_of
from models.engine.runs import pinned_facts
from models.formats import (
    CELL_MAX_CHARS,
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
from models.review import reasons
from models.states import RUN_TERMINAL
from models.tables import Escalation, Run, Step, utcnow

STATUS_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "cancelled": "dim",
    "running": "cyan",
    "queued": "yellow",
    "ready": "yellow",
    "pending": "dim",
    "waiting_review": "magenta",
    "waiting_approval": "magenta",
    "waiting_child": "cyan",
    "planning": "cyan",
    "replanning": "cyan",
    "synthesizing": "cyan",
    "open": "magenta",
    "claimed": "yellow",
    "decided": "green",
}
GOAL_STYLE = {"met": "green", "not_met": "red", "accepted": "magenta"}  # else dim
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


def steps_table(
    steps: list[Step],
    after: Mapping[int, Iterable[int]] | None = None,
    copied: Collection[int] = (),
) -> Table:
    """The steps of a plan in order, with their wave and what each waits for (`after`, by id:
    `models.plans.plans.dependencies`; None: a plain list, each step after the one before), status,
    attempts ("copied" for a fork's step `copied` from its source: `models.engine.forks`) and
    result or error. `tool` is the tool, or the kind of a step that calls none. Steps of one wave
    can run together; the caption says so when two share one."""
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
            "copied" if (s.id or 0) in copied else str(s.attempt),
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
    goal: GoalReport | None = None,
    lineage: str | None = None,
    copied: Collection[int] = (),
) -> RenderableType:
    """Everything about one run: budgets, pinned facts, its goal check (`goal`, else as told
    with no verdict: `models.engine.goal_reports`), the current plan (`steps` in order, `after`
    what each waits for, as `steps_table` takes), the procedures its plans used, escalation,
    answer, with `offer_procedure` the command that saves its plan as one, and its forks and
    child runs (`lineage`, `models.engine.lineage.Lineage.text`; `copied`: a fork's steps
    copied from its source)."""
    head = Table.grid(padding=(0, 2))
    head.add_row("goal", literal(run.goal))
    head.add_row("user", literal(run.user_id))
    head.add_row("status", styled(run.status))
    if lineage:
        head.add_row("lineage", literal(lineage))
    head.add_row("provider", Text(provider_label(run.provider)))
    head.add_row("pinned facts", facts_text(facts))
    for label, text in goal_rows(goal or report(run, None, pinned=facts)):
        head.add_row(label, text)
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
    parts: list[RenderableType] = [head, steps_table(steps, after, copied)]
    if escalation is not None:
        failed = next((s for s in steps if s.id and s.id == escalation.step_id), None)
        parts.append(escalation_summary(escalation, failed))
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


def goal_rows(goal: GoalReport) -> list[tuple[str, Text]]:
    """The goal check's rows (`GoalReport.rows`), its summary in the colour of its state and a
    row of several lines as a list."""
    rows: list[tuple[str, Text]] = []
    for label, lines in goal.rows:
        style = GOAL_STYLE.get(goal.state, "dim") if label == "goal check" else ""
        text = lines[0] if len(lines) == 1 else "\n".join(f"- {line}" for line in lines)
        rows.append((label, literal(text, style=style)))
    return rows


def escalation_summary(esc: Escalation, failed: Step | None) -> RenderableType:
    """`run show`'s lines on the run's open escalation: why it was opened (its reason and that
    in a reviewer's words: `models.review.reasons.why`), the failed step (`failed`, else the one
    its detail names) and its error, the detail's other values, and the command to decide it."""
    told = reasons.why(esc, failed)
    grid = Table.grid(padding=(0, 2))
    head = literal(f"escalation {esc.id} ({esc.status})", style="magenta")
    grid.add_row(head, literal(told.summary))
    step = failed.name if failed is not None else esc.detail.get("step")
    if step:
        tool = (failed.tool if failed is not None else None) or esc.detail.get("tool")
        grid.add_row("failed step", literal(f"{step} ({tool})" if tool else str(step)))
    for label, row in why_rows(told):
        grid.add_row(label, row)
    grid.add_row("decide", literal(f"agentq review show {esc.id}"))
    return grid


def why_rows(told: reasons.Why) -> list[tuple[str | Text, Text]]:
    """The `error` row and one row per other value of an escalation's detail (`told.extra`); a
    list of texts (a goal check's `missing`) as its lines joined by `; `, not as JSON."""
    rows: list[tuple[str | Text, Text]] = []
    if told.error:
        rows.append(("error", cell(told.error, DETAIL_MAX_CHARS, style="red")))
    for key, value in told.extra.items():
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            value = "; ".join(value)
        rows.append((literal(key), cell(value, DETAIL_MAX_CHARS)))
    return rows


def run_panel(session: Session, run: Run) -> RenderableType:
    """`render_run` for `run`, with its pinned facts, current plan and open escalation."""
    run_id = run.id or 0
    graph = current_graph(session, run)
    facts = pinned_facts(session, run_id)
    kin = lineage.read(session, run_id)
    return render_run(
        run,
        facts=facts,
        steps=list(graph.kept),
        escalation=queries.open_escalation(session, run_id),
        after=graph.after or {},
        procedures=used_by_run(session, run_id),
        offer_procedure=offers_procedure(session, run),
        goal=report_of(session, run, facts),
        lineage=kin.text(),
        copied=kin.copied_steps(),
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
