"""What the console shows of runs: progress, plan versions side by side, spend, the timeline.

Reads rows only. The current plan comes from `models.plans.current_steps` (for one run) or the
same query over many runs at once (`progress_of`, two queries for a whole list page).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlmodel import Session, col, select

from models.states import RUN_TERMINAL
from models.tables import Escalation, PlanVersion, Run, RunEvent, Step, utcnow

TIMELINE_MAX_EVENTS: Final = 300  # the newest ones; a run's whole timeline stays in run_events
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
    versions = session.exec(
        select(PlanVersion).where(col(PlanVersion.run_id).in_({run_id for run_id, _ in wanted}))
    ).all()
    current = [v for v in versions if (v.run_id, v.version) in wanted]
    ids = {step_id for v in current for step_id in v.step_ids}
    status_of = dict(session.exec(select(Step.id, Step.status).where(col(Step.id).in_(ids))).all())
    return {
        v.run_id: Progress(
            total=len(v.step_ids), by_status=dict(Counter(status_of[i] for i in v.step_ids))
        )
        for v in current
    }


@dataclass(frozen=True)
class PlanCell:
    """One step as it stands in one plan version; `mark` is `answered` for the failed step this
    version answers, `new` for a step this version spliced in, else empty."""

    step: Step
    mark: str


@dataclass(frozen=True)
class PlanColumn:
    """One plan version: who wrote it and why, and its steps in order."""

    version: PlanVersion
    cells: list[PlanCell]
    current: bool


def plan_columns(session: Session, run: Run) -> list[PlanColumn]:
    """Every plan version of the run, oldest first, each with its steps marked."""
    versions = session.exec(
        select(PlanVersion).where(PlanVersion.run_id == run.id).order_by(col(PlanVersion.version))
    ).all()
    steps = {s.id: s for s in session.exec(select(Step).where(Step.run_id == run.id))}
    return [
        PlanColumn(
            version=v,
            cells=[PlanCell(steps[i], _mark(steps[i], v)) for i in v.step_ids if i in steps],
            current=v.version == run.plan_version,
        )
        for v in versions
    ]


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
    """The run's replans, tokens, cost and wall time against their budgets."""
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


def timeline(session: Session, run_id: int) -> list[Moment]:
    """The run's newest `TIMELINE_MAX_EVENTS` events, oldest first."""
    events = list(
        session.exec(
            select(RunEvent)
            .where(RunEvent.run_id == run_id)
            .order_by(col(RunEvent.id).desc())
            .limit(TIMELINE_MAX_EVENTS)
        )
    )
    names = dict(session.exec(select(Step.id, Step.name).where(Step.run_id == run_id)).all())
    return [Moment(e, names.get(e.step_id, "") if e.step_id else "") for e in reversed(events)]


def run_escalations(session: Session, run_id: int) -> list[Escalation]:
    """Every escalation of the run, oldest first."""
    return list(
        session.exec(
            select(Escalation).where(Escalation.run_id == run_id).order_by(col(Escalation.id))
        )
    )


def last_event_id(session: Session, *, run_ids: Any = None, kind_prefix: str = "") -> int:
    """The newest event id (of `run_ids`, a list or a subquery; of kinds starting with
    `kind_prefix`): a page's version, which changes whenever anything it shows may have."""
    stmt = sa.select(sa.func.max(col(RunEvent.id)))
    if run_ids is not None:
        stmt = stmt.where(col(RunEvent.run_id).in_(run_ids))
    if kind_prefix:
        stmt = stmt.where(col(RunEvent.kind).startswith(kind_prefix))
    return int(session.scalar(stmt) or 0)
