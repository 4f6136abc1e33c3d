"""A run as shown: its steps and a page of its timeline, each large JSON value as a preview.

The API's run detail and the console's run page show a step's args and result and an event's
detail whole up to `PREVIEW_MAX_BYTES`; a larger one becomes a preview (`Shown.out`: its size and
the start of its JSON text), and the whole value is read from its own endpoint or page. Sizes and
previews are computed by Postgres, so a large value never reaches the process that shows the
run: issue 9 saw 16 parallel reads of a run holding 18 MB take the API from 1.0 to 2.3 GB.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy.engine import RowMapping
from sqlmodel import Session, col

from models.plans.step_data import compact_json
from models.tables import RunEvent, Step

PREVIEW_MAX_BYTES: Final = 2048
"""2 KiB: a value up to this size is shown whole, a larger one as its first 2,048 characters of
JSON. A page of 200 events and 50 steps then stays well under a few megabytes, whatever the run
holds."""
EVENTS_PAGE_DEFAULT: Final = 200  # the newest events of a run shown at once
EVENTS_PAGE_MAX: Final = 1000


@dataclass(frozen=True)
class Shown:
    """A JSON value as shown: `whole` when it is at most `PREVIEW_MAX_BYTES`, else None and
    `head` holds the start of its JSON text; `bytes` is its full size (None for SQL NULL)."""

    whole: Any
    bytes: int | None
    head: str | None

    @property
    def shortened(self) -> bool:
        """Whether only a preview is shown."""
        return self.head is not None

    def out(self) -> Any:
        """The value, or `{"shortened": True, "bytes": <full size>, "preview": <JSON text's
        start>}` when it is shortened."""
        if self.head is None:
            return self.whole
        return {"shortened": True, "bytes": self.bytes, "preview": self.head}


def shown(value: Any) -> Shown:
    """`value` (already in memory: a run's final result, an escalation's detail) as shown."""
    if value is None:
        return Shown(None, None, None)
    text = compact_json(value)
    size = len(text.encode("utf-8"))
    if size <= PREVIEW_MAX_BYTES:
        return Shown(value, size, None)
    return Shown(None, size, text[:PREVIEW_MAX_BYTES])


def shown_columns(column: Any, name: str) -> list[Any]:
    """`<name>_bytes`, `<name>_whole` (the value when small) and `<name>_head` (the start of its
    text when large), computed in Postgres from the jsonb column."""
    text = sa.cast(column, sa.Text)
    size = sa.func.octet_length(text)
    return [
        size.label(f"{name}_bytes"),
        sa.case((size <= PREVIEW_MAX_BYTES, column), else_=sa.null()).label(f"{name}_whole"),
        sa.case((size > PREVIEW_MAX_BYTES, sa.func.left(text, PREVIEW_MAX_BYTES))).label(
            f"{name}_head"
        ),
    ]


def shown_of(row: RowMapping, name: str) -> Shown:
    """The `Shown` of `name` from a row read with `shown_columns(..., name)`."""
    return Shown(row[f"{name}_whole"], row[f"{name}_bytes"], row[f"{name}_head"])


_STEPS: Any = Step.__table__  # type: ignore[attr-defined]
STEP_PLAIN_COLUMNS: Final = tuple(
    c.name for c in _STEPS.columns if c.name not in ("args", "result")
)


@dataclass(frozen=True)
class StepShown:
    """A step row without its args and result (`columns`), and those two as shown."""

    columns: dict[str, Any]
    args: Shown
    result: Shown


# steps_shown: the run's step rows with sizes and previews of their jsonb, by id. Built once: a
# select of case expressions costs more to build per call than Postgres takes to run it (issue 29).
STEPS_SHOWN: Final = (
    sa.select(
        *(_STEPS.c[name] for name in STEP_PLAIN_COLUMNS),
        *shown_columns(_STEPS.c.args, "args"),
        *shown_columns(_STEPS.c.result, "result"),
    )
    .where(_STEPS.c.run_id == sa.bindparam("run_id"))
    .order_by(_STEPS.c.id)
)


def steps_shown(session: Session, run_id: int) -> list[StepShown]:
    """Every step of the run (all plan versions), by id, args and results as previews
    (named query `steps_shown`)."""
    return [
        StepShown(
            {name: row[name] for name in STEP_PLAIN_COLUMNS},
            shown_of(row, "args"),
            shown_of(row, "result"),
        )
        for row in session.execute(STEPS_SHOWN, {"run_id": run_id}).mappings()
    ]


@dataclass(frozen=True)
class EventShown:
    """One timeline entry, its detail as shown."""

    id: int
    step_id: int | None
    at: Any
    kind: str
    detail: Shown
    run_id: int = 0  # set by `models.operations.event_feed.events_after`, which reads several runs


@dataclass(frozen=True)
class EventsPage:
    """Events of a run, oldest first; `older` is the id to pass as `before` for the page
    before this one (None: this page reaches the run's first event)."""

    events: list[EventShown]
    older: int | None


# events_page: one page of the run's timeline, newest first by id (below :before, in
# `EVENTS_PAGE_BEFORE`), :limit rows; details as previews. Built once, as `STEPS_SHOWN`.
EVENTS_PAGE: Final = (
    sa.select(
        col(RunEvent.id),
        col(RunEvent.step_id),
        col(RunEvent.at),
        col(RunEvent.kind),
        *shown_columns(col(RunEvent.detail), "detail"),
    )
    .where(col(RunEvent.run_id) == sa.bindparam("run_id"))
    .order_by(col(RunEvent.id).desc())
    .limit(sa.bindparam("limit"))
)
EVENTS_PAGE_BEFORE: Final = EVENTS_PAGE.where(col(RunEvent.id) < sa.bindparam("before"))


def events_page(
    session: Session, run_id: int, *, before: int | None = None, limit: int = EVENTS_PAGE_DEFAULT
) -> EventsPage:
    """The run's newest `limit` events with ids below `before` (all when None), oldest first
    (named query `events_page`, one row more than `limit` to know whether older ones remain)."""
    params: dict[str, int] = {"run_id": run_id, "limit": limit + 1}
    if before is None:
        rows = list(session.execute(EVENTS_PAGE, params).mappings())
    else:
        rows = list(session.execute(EVENTS_PAGE_BEFORE, params | {"before": before}).mappings())
    page = rows[:limit]
    events = [
        EventShown(r["id"], r["step_id"], r["at"], r["kind"], shown_of(r, "detail"))
        for r in reversed(page)
    ]
    return EventsPage(events, page[-1]["id"] if len(rows) > limit else None)


def step_result(session: Session, run_id: int, step_id: int) -> Step | None:
    """The step `step_id` of run `run_id` with its whole result; None when the run has no such
    step."""
    step = session.get(Step, step_id)
    return step if step is not None and step.run_id == run_id else None
