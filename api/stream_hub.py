"""One poller for every open event stream of an API process, and the streams' re-checks.

Each stream used to poll the database itself, twice every `AGENTQ_STREAM_POLL_INTERVAL_S`
(0.2 s): 200 streams on one run took the API process to 83% CPU and another user's `GET /runs`
from 9 ms to 414 ms median (issue 27, item 4). Now the streams of a process share one
`StreamHub` (one per event loop, and uvicorn serves a process from one loop), whose cycle runs
every `AGENTQ_STREAM_POLL_INTERVAL_S` in one thread, on one pooled connection:

1. each stream opened since the last cycle: its first read, as its own poll read before (its
   run's state, then its events after its cursor);
2. every `AGENTQ_STREAM_RECHECK_S`: which of the streams' tokens are still live
   (`models.access.api_tokens.live_token_ids`) and which console sessions
   (`models.access.ui_sessions.live_session_ids`), one statement each;
3. the state of every run streamed (`models.operations.event_feed.run_states`), before the events,
so that a run's final status comes with its last event;
4. the events after the hub's own cursor, of every run (`events_after`, page by page).

So the database work of a process is at most four statements a cycle, plus one first read per
stream opened, however many streams are open. The hub hands each stream the rows it may see (its
run's events; every `escalation.*` event for the review stream); the stream drops what it sent
already with its own `EventFeed` and formats the messages (`api.streams`). A stream whose token
was revoked, whose console session ended or whose run was purged gets `Delivery.ended` at the
next re-check (issue 27, item 3: a revoked token's review stream kept delivering for good).

Not LISTEN/NOTIFY: every transition would pay for a NOTIFY in its transaction, a listener holds a
connection of its own, and a notification does not say which lower id committed late, so the
poll would stay as the fallback anyway. The hub starts its cursor at `settled_bound` (no row
committing late is missed) and stops when its last stream closes. A cycle that fails (the
database is down) ends every stream of the hub, as a failed poll ended its stream before;
clients resume with `Last-Event-ID`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field

import anyio
import structlog
from sqlmodel import Session

from models.access import api_tokens, ui_sessions
from models.db import session_scope
from models.engine.previews import EVENTS_PAGE_MAX, EventShown
from models.operations.event_feed import (
    EventFeed,
    RunState,
    events_after,
    run_states,
    settled_bound,
)
from models.settings import get_settings
from models.tables import utcnow

REVIEW_KINDS = "escalation."  # the review stream's events: `escalation.*` of every run
log = structlog.get_logger("agentq.api")


@dataclass(frozen=True)
class Delivery:
    """What a cycle hands one stream: its run's `state` when it changed (or on its first read),
    the new `rows` it may see, oldest first, or why it must end now (`ended`)."""

    state: RunState | None = None
    rows: list[EventShown] = field(default_factory=list)
    ended: str = ""


@dataclass(eq=False)
class Subscriber:
    """One open stream: where it stands (`feed`), whose it is (`token_id`; `session_id` for a
    console stream's session row), and what it follows: run `run_id`'s events, or with None
    the review stream's (`REVIEW_KINDS`)."""

    feed: EventFeed
    token_id: int
    run_id: int | None = None
    session_id: int | None = None
    inbox: asyncio.Queue[Delivery] = field(default_factory=asyncio.Queue)
    state: RunState | None = None  # the run's state last handed over
    closed: bool = False

    def wants(self, row: EventShown) -> bool:
        """Whether this stream follows `row` (visibility was checked when it opened)."""
        if self.run_id is not None:
            return row.run_id == self.run_id
        return row.kind.startswith(REVIEW_KINDS)


@dataclass(frozen=True)
class Reading:
    """One cycle's reads: first reads by stream, live tokens and sessions (None: not re-checked
    this cycle), the runs' states, the hub's cursor start (when it had none) and its rows."""

    first: dict[Subscriber, Delivery]
    tokens: set[int] | None
    sessions: set[int] | None
    states: dict[int, RunState]
    start: int | None
    rows: list[EventShown]


def read_all(
    session: Session, after: int, *, run_id: int | None = None, kind_prefix: str = ""
) -> list[EventShown]:
    """Every event above `after` (of run `run_id`, of kinds starting with `kind_prefix`: as
    `events_after`), oldest first, page by page."""
    rows: list[EventShown] = []
    while True:
        last = rows[-1].id if rows else after
        batch = events_after(session, after=last, run_id=run_id, kind_prefix=kind_prefix)
        rows += batch
        if len(batch) < EVENTS_PAGE_MAX:
            return rows


def first_read(session: Session, sub: Subscriber) -> Delivery:
    """A stream's first delivery: its run's state (read first: once the run is final, the
    events read next include its last one) and its events after its cursor; ended when its run
    does not exist (any more)."""
    if sub.run_id is None:
        return Delivery(rows=read_all(session, sub.feed.after, kind_prefix=REVIEW_KINDS))
    state = run_states(session, [sub.run_id]).get(sub.run_id)
    if state is None:
        return Delivery(ended=f"run {sub.run_id} does not exist")
    return Delivery(state, read_all(session, sub.feed.after, run_id=sub.run_id))


@dataclass(frozen=True)
class Plan:
    """What one cycle reads: the first reads of `joining`, the credentials of `rechecked` (None:
    no re-check this cycle), the states of `runs`, and the events after the hub's cursor
    `after` (None: it has none yet, so it starts at `settled_bound`)."""

    joining: list[Subscriber]
    rechecked: list[Subscriber] | None
    runs: set[int]
    after: int | None


def read(plan: Plan) -> Reading:
    """One cycle's reads (the module's doc), in one session; in a worker thread."""
    now = utcnow()
    with session_scope() as session:
        first = {sub: first_read(session, sub) for sub in plan.joining}
        tokens = sessions = None
        if plan.rechecked is not None:
            tokens, sessions = live_credentials(session, plan.rechecked)
        states = run_states(session, plan.runs)
        start = settled_bound(session, now) if plan.after is None else None
        rows = read_all(session, plan.after if plan.after is not None else start or 0)
    return Reading(first, tokens, sessions, states, start, rows)


class StreamHub:
    """The open streams of one event loop and their shared poll (the module's doc)."""

    def __init__(self) -> None:
        self.streams: set[Subscriber] = set()
        self.joining: list[Subscriber] = []
        self.feed: EventFeed | None = None
        self.checked_at = float("-inf")
        self._task: asyncio.Task[None] | None = None

    def join(self, sub: Subscriber) -> None:
        """Follow `sub` from the next cycle on (its first read comes then)."""
        self.joining.append(sub)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def leave(self, sub: Subscriber) -> None:
        """Stop following `sub` (it closed); idempotent."""
        sub.closed = True
        self.streams.discard(sub)
        if sub in self.joining:
            self.joining.remove(sub)

    async def _run(self) -> None:
        try:
            while self.streams or self.joining:
                await self.cycle()
                await asyncio.sleep(get_settings().stream_poll_interval_s)
        finally:
            self._task, self.feed = None, None

    async def cycle(self) -> None:
        """One cycle: the reads in a worker thread, then each stream's delivery."""
        joining, self.joining = self.joining, []
        recheck = time.monotonic() - self.checked_at >= get_settings().stream_recheck_s
        everyone = [*self.streams, *joining]
        plan = Plan(
            joining=joining,
            rechecked=everyone if recheck else None,
            runs={s.run_id for s in everyone if s.run_id is not None},
            after=None if self.feed is None else self.feed.after,
        )
        try:
            reading = await anyio.to_thread.run_sync(read, plan)
        except Exception:
            log.warning("event streams: a poll failed; ending them", exc_info=True)
            for sub in everyone:
                sub.inbox.put_nowait(Delivery(ended="the poll failed"))
            self.streams.clear()
            return
        if recheck:
            self.checked_at = time.monotonic()
        self._deliver(reading, joining)

    def _deliver(self, reading: Reading, joining: list[Subscriber]) -> None:
        if self.feed is None:
            self.feed = EventFeed(reading.start or 0)
        rows = self.feed.take(reading.rows, utcnow())
        for sub in joining:
            if not sub.closed:
                delivery = reading.first[sub]
                sub.state = delivery.state
                self._hand(sub, delivery)
        for sub in list(self.streams):
            self._hand(sub, self._delivery(sub, reading, rows))

    def _hand(self, sub: Subscriber, delivery: Delivery | None) -> None:
        if delivery is None:
            return
        sub.inbox.put_nowait(delivery)
        if delivery.ended:
            self.streams.discard(sub)
        else:
            self.streams.add(sub)

    def _delivery(
        self, sub: Subscriber, reading: Reading, rows: list[EventShown]
    ) -> Delivery | None:
        """What `sub` gets of this cycle; None when nothing."""
        ended = why_ended(sub, reading)
        if ended:
            return Delivery(ended=ended)
        state = reading.states.get(sub.run_id) if sub.run_id is not None else None
        changed = state if state != sub.state else None
        sub.state = state or sub.state
        mine = [row for row in rows if sub.wants(row)]
        return Delivery(changed, mine) if changed or mine else None


def live_credentials(session: Session, subs: Collection[Subscriber]) -> tuple[set[int], set[int]]:
    """The live tokens and console sessions among those of `subs`: one statement each."""
    settings = get_settings()
    lifetime = ui_sessions.Lifetime(
        idle_s=settings.ui_session_idle_s, max_age_s=settings.ui_session_max_age_s
    )
    tokens = api_tokens.live_token_ids(session, {s.token_id for s in subs})
    wanted = {s.session_id for s in subs if s.session_id is not None}
    sessions = ui_sessions.live_session_ids(session, wanted, lifetime=lifetime, now=utcnow())
    return tokens, sessions


def why_ended(sub: Subscriber, reading: Reading) -> str:
    """Why `sub` must end after this cycle's reads ("": it goes on)."""
    if reading.tokens is not None and sub.token_id not in reading.tokens:
        return "the token was revoked"
    console = sub.session_id is not None and reading.sessions is not None
    if console and sub.session_id not in (reading.sessions or ()):
        return "the console session ended"
    if sub.run_id is not None and sub.run_id not in reading.states:
        return f"run {sub.run_id} does not exist"
    return ""


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StreamHub] = weakref.WeakKeyDictionary()


def hub() -> StreamHub:
    """This event loop's hub (uvicorn runs an API process on one loop: one hub per process)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = StreamHub()
    return _hubs[loop]


async def deliveries(sub: Subscriber, lifetime_s: float) -> AsyncIterator[Delivery | None]:
    """`sub`'s deliveries from this loop's hub until one says it ended, then nothing more; or,
    once `lifetime_s` has passed, None (the caller ends the stream for the client to resume).
    The stream joins the hub on the first step and leaves it however it ends."""
    shared = hub()
    shared.join(sub)
    deadline = time.monotonic() + lifetime_s
    try:
        while True:
            try:
                delivery = await asyncio.wait_for(sub.inbox.get(), deadline - time.monotonic())
            except TimeoutError:
                yield None
                return
            if delivery.ended:
                return
            yield delivery
    finally:
        shared.leave(sub)
