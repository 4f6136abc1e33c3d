"""What the console shows of runs: progress, plan versions side by side, spend, the timeline.

Reads rows only. The current plan comes from the run's plan versions (for one run) or the same
query over many runs at once (`progress_of`, two queries for a whole list page). Steps and events
are read as `models.engine.previews` shows them: a result or detail over its preview size never
leaves Postgres whole; the step result page (`/ui/runs/{id}/steps/{step_id}/result`) shows one
whole.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from sqlmodel import Session

from models.engine import previews
from models.front import queries
from models.memory import memory_admin
from models.plans.layout import Place, places, runs_together
from models.plans.plans import dependencies
from models.states import RUN_TERMINAL
from models.tables import PlanVersion, Run, RunEvent, Step, utcnow

TIMELINE_MAX_EVENTS: Final = previews.EVENTS_PAGE_DEFAULT  # a page; older ones page back
WARN_SHARE: Final = 0.75  # a budget meter turns amber at 75 % spent


@dataclass(frozen=True)
class Progress:
    """How far a run's current plan is: steps by status. Progress counts succeeded steps only;
    a failed step is shown apart ("1 failed"), never as done."""

    total: int = 0
    by_status: dict[str, int] = field(default_factory=dict)

    @property
    def succeeded(self) -> int:
        """Steps that succeeded."""
        return self.by_status.get("succeeded", 0)

    @property
    def failed(self) -> int:
        """Steps that failed (a reviewer or a replan may still fix the run)."""
        return self.by_status.get("failed", 0)


def progress_of(session: Session, runs: list[Run]) -> dict[int, Progress]:
    """The `Progress` of each run's current plan version, by run id."""
    wanted = {(r.id, r.plan_version) for r in runs if r.plan_version}
    if not wanted:
        return {}
    versions = queries.plan_versions_of_runs(session, {i for i, _ in wanted if i is not None})
    current = [v for v in versions if (v.run_id, v.version) in wanted]
    ids = {step_id for v in current for step_id in v.step_ids}
    status_of = queries.step_statuses(session, ids)
    return {
        v.run_id: Progress(
            total=len(v.step_ids), by_status=dict(Counter(status_of[i] for i in v.step_ids))
        )
        for v in current
    }


@dataclass(frozen=True)
class PlanCell:
    """One step as it stands in one plan version; `mark` is `answered` for the failed step this
    version answers, `new` for a step this version spliced in, else empty; `place` its wave and
    what it waits for in this version (a replan rewires dependents: `models.plans.graph.splice`)."""

    step: Step
    mark: str
    result: previews.Shown
    place: Place = field(default_factory=lambda: Place(1))


@dataclass(frozen=True)
class PlanColumn:
    """One plan version: who wrote it and why, and its steps in order."""

    version: PlanVersion
    cells: list[PlanCell]
    current: bool

    @property
    def waves(self) -> list[list[PlanCell]]:
        """The steps grouped by wave (`models.plans.layout`), waves in order, plan order in each."""
        groups: dict[int, list[PlanCell]] = {}
        for cell in self.cells:
            groups.setdefault(cell.place.wave, []).append(cell)
        return [groups[w] for w in sorted(groups)]

    @property
    def together(self) -> bool:
        """Whether two steps of this version share a wave (it is more than a chain)."""
        return runs_together({c.step.id or 0: c.place for c in self.cells})


def plan_columns(session: Session, run: Run) -> list[PlanColumn]:
    """Every plan version of the run, oldest first, each with its steps marked, placed in its
    graph, and their results as shown (`models.engine.previews`; the rows' args are not read)."""
    versions = queries.plan_versions(session, run.id or 0)
    shown = {s.columns["id"]: s for s in previews.steps_shown(session, run.id or 0)}
    steps = {i: Step(**s.columns) for i, s in shown.items()}  # unsaved: never flushed
    names = {i: s.name for i, s in steps.items()}
    current = run.plan_version
    return [_column(v, steps, shown, names, current=v.version == current) for v in versions]


def _column(
    version: PlanVersion,
    steps: dict[int, Step],
    shown: dict[int, previews.StepShown],
    names: dict[int, str],
    *,
    current: bool,
) -> PlanColumn:
    order = [i for i in version.step_ids if i in steps]
    found = places(order, dependencies(version), names)
    cells = [PlanCell(steps[i], _mark(steps[i], version), shown[i].result, found[i]) for i in order]
    return PlanColumn(version=version, cells=cells, current=current)


def current_cells(columns: list[PlanColumn]) -> list[PlanCell]:
    """The steps of the current plan version, in order (none before the first plan)."""
    return next((c.cells for c in columns if c.current), [])


def _mark(step: Step, version: PlanVersion) -> str:
    if step.id is not None and step.id == version.replaces_step_id:
        return "answered"
    return "new" if version.version > 1 and step.plan_version == version.version else ""


@dataclass(frozen=True)
class Meter:
    """A budget: what was used against its limit, as text and as a share for the bar."""

    label: str
    used: str
    limit: str
    share: float

    @property
    def tone(self) -> str:
        """`ok`, `warn` (at `WARN_SHARE`), or `bad` once spent."""
        return "bad" if self.share >= 1 else "warn" if self.share >= WARN_SHARE else "ok"

    @property
    def percent(self) -> int:
        """The bar's width, 0 to 100."""
        return round(min(max(self.share, 0.0), 1.0) * 100)


def _share(used: float, limit: float) -> float:
    return used / limit if limit > 0 else (1.0 if used > 0 else 0.0)


def spend(run: Run, now: datetime | None = None) -> list[Meter]:
    """The run's replans, tokens, cost, wall time and step data against their budgets."""
    end = run.finished_at if run.status in RUN_TERMINAL and run.finished_at else now or utcnow()
    elapsed_s = (end - run.created_at).total_seconds()
    wall_s = run.wall_time_limit_s
    if run.deadline_at is not None:  # a reviewer's grant moves the deadline on
        wall_s = (run.deadline_at - run.created_at).total_seconds()
    return [
        Meter(
            "replans",
            str(run.replans_used),
            str(run.replans_limit),
            _share(run.replans_used, run.replans_limit),
        ),
        Meter(
            "tokens",
            f"{run.tokens_used:,}",
            f"{run.tokens_limit:,}",
            _share(run.tokens_used, run.tokens_limit),
        ),
        Meter(
            "cost",
            f"${run.cost_used_usd:.4f}",
            f"${run.cost_limit_usd:.2f}",
            _share(run.cost_used_usd, run.cost_limit_usd),
        ),
        Meter("wall time", f"{elapsed_s:,.0f} s", f"{wall_s:,.0f} s", _share(elapsed_s, wall_s)),
        Meter(
            "step data",
            f"{run.step_data_bytes:,} B",
            f"{run.step_data_limit_bytes:,} B",
            _share(run.step_data_bytes, run.step_data_limit_bytes),
        ),
    ]


@dataclass(frozen=True)
class Moment:
    """One entry of the timeline, with the name of the step it concerns."""

    event: RunEvent
    step_name: str

    @property
    def detail(self) -> dict[str, Any]:
        """The event's detail, without empty values."""
        return {k: v for k, v in self.event.detail.items() if v not in ("", None, {}, [])}


@dataclass(frozen=True)
class Timeline:
    """A page of the timeline, oldest first; `older` is the event id to page back from (None:
    the page reaches the run's first event)."""

    moments: list[Moment]
    older: int | None


def timeline(
    session: Session, run_id: int, *, memory_readable: bool, before: int | None = None
) -> Timeline:
    """The run's newest `TIMELINE_MAX_EVENTS` events (with ids below `before`), oldest first,
    large details as previews (`models.engine.previews.events_page`); without `memory_readable` (the
    reader may not read the run's user's memory) the events that quote recalled memory are
    hidden (`models.memory.memory_admin.shown_events`)."""
    page = previews.events_page(session, run_id, before=before, limit=TIMELINE_MAX_EVENTS)
    events = [
        RunEvent(
            id=e.id, run_id=run_id, step_id=e.step_id, at=e.at, kind=e.kind, detail=e.detail.out()
        )
        for e in page.events
    ]  # unsaved copies: never flushed
    names = queries.step_names(session, run_id)
    shown = memory_admin.shown_events(events, memory_readable=memory_readable)
    moments = [Moment(e, names.get(e.step_id, "") if e.step_id else "") for e in shown]
    return Timeline(moments, page.older)
