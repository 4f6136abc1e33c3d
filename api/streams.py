"""Server-sent event streams: a run's timeline as it is written, and the review queue's events.

`GET /api/v1/runs/{run_id}/events/stream` sends `event: status` (a `RunStatusOut`) first and
whenever the run's status changes, `event: timeline` (a `StreamEventOut`, `id:` its event id)
for each event, oldest first, and `event: end` (a `RunStatusOut`) once the run is final, then
closes. `GET /api/v1/reviews/stream` sends `event: timeline` for every `escalation.*` event of
any run, and stays open. Both resume after the `Last-Event-ID` header (what `EventSource` sends
when it reconnects) or the `after` query parameter: a run's stream starts at its first event
without them, the review stream at the newest one. Idle streams send a keep-alive comment every
`AGENTQ_STREAM_KEEPALIVE_S`.

The same rules as the plain reads: a submitter streams only its own user's runs (another's is
a 404), the review stream is for reviewers and admins, and events quoting recalled memory are
reduced for a token that may not read the user's memory (`api.memory.without_memory`'s rule).
The token is checked when the stream opens.

The source is a poll of `models.event_feed.events_after` every `AGENTQ_STREAM_POLL_INTERVAL_S`
(0.2 s) on a pooled connection, not LISTEN/NOTIFY: a listener holds a connection of its own
for as long as a client watches, and the writers (`models.events.record_event`, on every
transition) would pay for a NOTIFY each; polling costs one indexed query per stream per poll
and reaches a client within the interval (`tests/api/test_streams.py` measures it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.auth import AnyPrincipal, Principal, Reviewer
from api.responses import RunStatusOut, StreamEventOut
from api.runs import RunId, visible_run
from api.schemas import PG_INT_MAX
from models import memory_admin, queries
from models.db import session_scope
from models.event_feed import EventFeed, events_after
from models.previews import EVENTS_PAGE_MAX, EventShown
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import Run, utcnow

router = APIRouter(tags=["streams"])
After = Annotated[
    int | None,
    Query(ge=0, le=PG_INT_MAX, description="Send only events with ids above this."),
]
LastEventId = Annotated[
    str | None, Header(description="Resume after this event id (sent by `EventSource`).")
]
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "A server-sent event stream."}
}


def start_after(last_event_id: str | None, after: int | None) -> int | None:
    """Where a stream resumes: `Last-Event-ID` when it is an event id, else `after`."""
    if last_event_id is not None and last_event_id.strip().isdigit():
        return min(int(last_event_id), PG_INT_MAX)
    return after


def stream_event(event: EventShown, principal: Principal, user_id: str) -> ServerSentEvent:
    """One `timeline` message, its detail reduced when it quotes memory `principal` may not
    read."""
    out = StreamEventOut(
        id=event.id,
        run_id=event.run_id,
        step_id=event.step_id,
        at=event.at,
        kind=event.kind,
        detail=event.detail.out(),
        shortened=event.detail.shortened,
    )
    if event.kind in memory_admin.MEMORY_EVENT_KINDS and not principal.can_read_memory(user_id):
        out.detail = memory_admin.hidden_detail(out.detail)
    return ServerSentEvent(out.model_dump_json(), event="timeline", id=str(event.id))


def read_all(after: int, **where: Any) -> list[EventShown]:
    """Every event above `after` matching `where` (`events_after`'s filters), page by page."""
    rows: list[EventShown] = []
    with session_scope() as session:
        while True:
            batch = events_after(session, after=rows[-1].id if rows else after, **where)
            rows += batch
            if len(batch) < EVENTS_PAGE_MAX:
                return rows


def poll_run(run_id: int, after: int) -> tuple[Run | None, list[EventShown]]:
    """The run (read first: once it is final, the events read next include its last one) and
    its events above `after`."""
    with session_scope() as session:
        run = session.get(Run, run_id)
        if run is not None:
            session.expunge(run)
    return run, read_all(after, run_id=run_id)


def status_event(run: Run, kind: str) -> ServerSentEvent:
    out = RunStatusOut(run_id=run.id or 0, status=run.status, plan_version=run.plan_version)
    return ServerSentEvent(out.model_dump_json(), event=kind)


async def run_messages(
    run_id: int, principal: Principal, after: int | None
) -> AsyncIterator[ServerSentEvent]:
    """The messages of a run's stream until the run is final (or gone)."""
    feed, interval_s, status = EventFeed(after or 0), get_settings().stream_poll_interval_s, ""
    while True:
        run, rows = await anyio.to_thread.run_sync(poll_run, run_id, feed.after)
        if run is None:
            return
        if run.status != status:
            status = run.status
            yield status_event(run, "status")
        for event in feed.take(rows, utcnow()):
            yield stream_event(event, principal, run.user_id)
        if run.status in RUN_TERMINAL:
            yield status_event(run, "end")
            return
        await anyio.sleep(interval_s)


async def review_messages(principal: Principal, after: int) -> AsyncIterator[ServerSentEvent]:
    """The messages of the review stream: every `escalation.*` event above `after`."""
    feed, interval_s = EventFeed(after), get_settings().stream_poll_interval_s
    while True:
        rows = await anyio.to_thread.run_sync(
            lambda: read_all(feed.after, kind_prefix="escalation.")
        )
        for event in feed.take(rows, utcnow()):
            yield stream_event(event, principal, "")  # escalation events quote no memory
        await anyio.sleep(interval_s)


def newest_review_event() -> int:
    """The newest `escalation.*` event id: where the review stream starts by default."""
    with session_scope() as session:
        return queries.last_event_id(session, kind_prefix="escalation.")


def responding(messages: Callable[[], AsyncIterator[ServerSentEvent]]) -> EventSourceResponse:
    """The stream's response, with keep-alive comments."""
    return EventSourceResponse(messages(), ping=int(max(1, get_settings().stream_keepalive_s)))


@router.get(
    "/runs/{run_id}/events/stream",
    response_class=EventSourceResponse,
    responses=SSE_RESPONSE,
    summary="A run's events, live",
)
def stream_run(
    run_id: RunId,
    principal: AnyPrincipal,
    after: After = None,
    last_event_id: LastEventId = None,
) -> EventSourceResponse:
    """The run's timeline as server-sent events until it is final (the module's doc has the
    messages). 404 as for `GET /runs/{run_id}`."""
    with session_scope() as session:
        visible_run(session, run_id, principal)
    start = start_after(last_event_id, after)
    return responding(lambda: run_messages(run_id, principal, start))


@router.get(
    "/reviews/stream",
    response_class=EventSourceResponse,
    responses=SSE_RESPONSE,
    summary="The review queue's events, live",
)
def stream_reviews(
    principal: Reviewer, after: After = None, last_event_id: LastEventId = None
) -> EventSourceResponse:
    """Every `escalation.*` event (raised, claimed, released, decided, ...) as server-sent
    events, from the newest on unless resumed. Reviewer or admin."""
    start = start_after(last_event_id, after)
    first = newest_review_event() if start is None else start
    return responding(lambda: review_messages(principal, first))
