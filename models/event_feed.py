"""A live feed of timeline events, read by id cursor: what the API's event streams send.

A stream polls `events_after` every `AGENTQ_STREAM_POLL_INTERVAL_S` and gives each new row to
`EventFeed.take`. Ids come from one sequence but transactions commit in any order, so a row with
a lower id can become visible after a higher one was read: a plain `id > last sent` cursor would
skip it for good. The feed therefore queries from a lower bound that trails the newest event by
`SETTLE_S` of event time and remembers which ids above it it sent, so such a row is sent when it
appears and no row is sent twice. A transaction holds its locks for milliseconds (invariant 11,
docs/DESIGN.md), so a row whose insert is `SETTLE_S` old has committed or never will.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

import sqlalchemy as sa
from sqlmodel import Session, col

from models.previews import EVENTS_PAGE_MAX, EventShown, shown_columns, shown_of
from models.tables import RunEvent

SETTLE_S: Final = 10.0
"""How long after its insert (`run_events.at`) a row is taken to have committed or rolled back:
far above a transaction's milliseconds, and above the clock skew of two hosts kept by NTP."""


def events_after(
    session: Session,
    *,
    after: int,
    run_id: int | None = None,
    kind_prefix: str = "",
    limit: int = EVENTS_PAGE_MAX,
) -> list[EventShown]:
    """The events with ids above `after`, oldest first, at most `limit`: of run `run_id` (None:
    every run's) and of kinds starting with `kind_prefix`; details over 2 KiB as previews.

    Named query `events_after`: a stream's poll, on the primary key (and `run_events.run_id`).
    """
    stmt = (
        sa.select(
            col(RunEvent.id),
            col(RunEvent.step_id),
            col(RunEvent.at),
            col(RunEvent.kind),
            *shown_columns(col(RunEvent.detail), "detail"),
            col(RunEvent.run_id),
        )
        .where(col(RunEvent.id) > after)
        .order_by(col(RunEvent.id))
        .limit(limit)
    )
    if run_id is not None:
        stmt = stmt.where(col(RunEvent.run_id) == run_id)
    if kind_prefix:
        stmt = stmt.where(col(RunEvent.kind).startswith(kind_prefix))
    return [
        EventShown(r["id"], r["step_id"], r["at"], r["kind"], shown_of(r, "detail"), r["run_id"])
        for r in session.execute(stmt).mappings()
    ]


@dataclass
class EventFeed:
    """Where a stream stands: `after`, the lower bound of its next query (every id at or below
    it was sent, or settled before it could be), and `sent`, the ids above it already sent, with
    their insert times. Start it at the `Last-Event-ID` a client resumes from, or 0."""

    after: int = 0
    sent: dict[int, datetime] = field(default_factory=dict)

    def take(self, rows: list[EventShown], now: datetime) -> list[EventShown]:
        """The rows of one poll not sent yet, oldest first; the bound then moves up past every
        row sent that settled (`SETTLE_S` before `now`, a UTC time like `run_events.at`)."""
        new = [r for r in rows if r.id not in self.sent]
        self.sent.update((r.id, r.at) for r in new)
        settled = [i for i, at in self.sent.items() if at <= now - timedelta(seconds=SETTLE_S)]
        if settled:
            self.after = max(self.after, *settled)
            self.sent = {i: at for i, at in self.sent.items() if i > self.after}
        return new

    @property
    def newest(self) -> int:
        """The highest id sent (or the starting point): what a client resumes from."""
        return max([self.after, *self.sent])
