"""A live feed of timeline events, read by id cursor: what the API's event streams send.

The API's one poller per process (`api.stream_hub`) reads `events_after` every
`AGENTQ_STREAM_POLL_INTERVAL_S` and gives each new row to `EventFeed.take`; so does each stream
it feeds, with the rows it may see. Ids come from one sequence but transactions commit in any
order, so a row with a lower id can become visible after a higher one was read: a plain
`id > last sent` cursor would skip it for good. The feed therefore queries from a lower bound
that trails the newest event by `SETTLE_S` of event time and remembers which ids above it it
sent, so such a row is sent when it appears and no row is sent twice. A transaction holds its
locks for milliseconds (invariant 11, docs/DESIGN.md), so a row whose insert is `SETTLE_S` old
has committed or never will. A stream that ends (its lifetime, `api.streams`) hands the client
`EventFeed.cursor`, which resumes it exactly: the late row is still sent, and no row twice.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

import sqlalchemy as sa
from sqlmodel import Session, col

from models.bounds import PG_INT_MAX
from models.engine.previews import EVENTS_PAGE_MAX, EventShown, shown_columns, shown_of
from models.tables import Run, RunEvent

SETTLE_S: Final = 10.0
"""How long after its insert (`run_events.at`) a row is taken to have committed or rolled back:
far above a transaction's milliseconds, and above the clock skew of two hosts kept by NTP."""
CURSOR_IDS_MAX: Final = 200
"""The most sent ids a resume cursor (`EventFeed.cursor`) lists, about 2 KB of header: the
events of one stream in `SETTLE_S`. Beyond it the cursor is the bound alone."""
_CURSOR: Final = re.compile(
    rf"(\d{{1,10}})(?:;(\d{{1,10}}(?:,\d{{1,10}}){{0,{CURSOR_IDS_MAX - 1}}}))?"
)


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


# settled_bound: the newest event inserted `SETTLE_S` or more ago, walking back from the newest
# id on the primary key: where a feed that knows nothing yet may start without missing a row.
SETTLED_BOUND = "SELECT id FROM run_events WHERE at <= :cutoff ORDER BY id DESC LIMIT 1"


def settled_bound(session: Session, now: datetime) -> int:
    """The newest event id inserted `SETTLE_S` or more before `now` (UTC, as `EventFeed.take`
    is given): every id at or below it has committed or never will, so a feed starting there
    and taking the newer rows as they appear misses none. 0 for an empty table."""
    cutoff = now - timedelta(seconds=SETTLE_S)
    return int(session.execute(sa.text(SETTLED_BOUND), {"cutoff": cutoff}).scalar() or 0)


@dataclass(frozen=True)
class RunState:
    """What a run's stream says about the run: its status and plan version, and its user (whose
    memory its events may quote)."""

    run_id: int
    status: str
    plan_version: int
    user_id: str


def run_states(session: Session, run_ids: Collection[int]) -> dict[int, RunState]:
    """The state of each run of `run_ids` that exists, by id (a purged run is missing).

    Named query `run_states`: one primary-key lookup per run, in one statement.
    """
    if not run_ids:
        return {}
    stmt = sa.select(col(Run.id), col(Run.status), col(Run.plan_version), col(Run.user_id)).where(
        col(Run.id).in_(sorted(run_ids))
    )
    return {r[0]: RunState(r[0], r[1], r[2], r[3]) for r in session.execute(stmt)}


@dataclass
class EventFeed:
    """Where a stream stands: `after`, the lower bound of its next query (every id at or below
    it was sent, or settled before it could be), and `sent`, the ids above it already sent, with
    their insert times. Start it at the `Last-Event-ID` a client resumes from, or 0."""

    after: int = 0
    sent: dict[int, datetime] = field(default_factory=dict)

    def take(self, rows: list[EventShown], now: datetime) -> list[EventShown]:
        """The rows of one poll not sent yet, oldest first; the bound then moves up past every
        row sent that settled (`SETTLE_S` before `now`, a UTC time like `run_events.at`). Rows at
        or below the bound were sent already (a shared poll's rows can overlap a stream's own
        first read), and are not sent again."""
        new = [r for r in rows if r.id > self.after and r.id not in self.sent]
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

    def cursor(self) -> str:
        """Where a client resumes this feed exactly: `"<after>;<sent>,<sent>..."` (the ids above
        the bound already sent), or `"<after>"` when none are, or more than `CURSOR_IDS_MAX`
        (then the events above the bound that were sent are sent again; none is missed).
        `resumed` reads it back; a plain event id reads as a bound."""
        sent = sorted(self.sent)
        if not sent or len(sent) > CURSOR_IDS_MAX:
            return str(self.after)
        return f"{self.after};{','.join(map(str, sent))}"

    @classmethod
    def resumed(cls, cursor: str, now: datetime) -> EventFeed | None:
        """The feed `cursor` (an `EventFeed.cursor`, or an event id) describes, its sent ids
        taken as inserted at `now`; None when it is neither, or names an id over `PG_INT_MAX`
        or a sent id at or below its bound."""
        found = _CURSOR.fullmatch(cursor.strip())
        if found is None:
            return None
        after = int(found[1])
        sent = [int(i) for i in found[2].split(",")] if found[2] else []
        if max([after, *sent]) > PG_INT_MAX or any(i <= after for i in sent):
            return None
        return cls(after, dict.fromkeys(sent, now))
