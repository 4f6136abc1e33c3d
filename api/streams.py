"""Server-sent event streams: a run's timeline as it is written, and the review queue's events.

`GET /api/v1/runs/{run_id}/events/stream` sends `event: status` (a `RunStatusOut`) first and
whenever the run's status changes, `event: timeline` (a `StreamEventOut`, `id:` its event id)
for each event, oldest first, and `event: end` (a `RunStatusOut`) once the run is final, then
closes. `GET /api/v1/reviews/stream` sends `event: timeline` for every `escalation.*` event of
any run. Both resume after the `Last-Event-ID` header (what `EventSource` sends when it
reconnects) or the `after` query parameter: a run's stream starts at its first event without
them, the review stream at the newest one. Idle streams send a keep-alive comment every
`AGENTQ_STREAM_KEEPALIVE_S`.

Every stream lives at most `AGENTQ_STREAM_LIFETIME_S`; then the server sends `event:
reconnect` (`{"reason": "lifetime"}`) whose `id:` is the stream's exact position
(`models.operations.event_feed.EventFeed.cursor`) and closes it: a client that reconnects with it as
`Last-Event-ID` (an `EventSource` does so by itself) gets every event it has not had, and none
twice. A stream ends without a message when its token is revoked (checked every
`AGENTQ_STREAM_RECHECK_S`, `api.stream_hub`) or its run is purged.

The same rules as the plain reads: a submitter streams only its own user's runs (another's is
a 404), the review stream is for reviewers and admins, and events quoting recalled memory are
reduced for a token that may not read the user's memory (`api.memory.without_memory`'s rule).
A token holds at most `AGENTQ_STREAM_MAX_PER_TOKEN` streams at once (429 beyond,
`api.token_limits`). The events come from the process's one poller (`api.stream_hub`), every
`AGENTQ_STREAM_POLL_INTERVAL_S`, however many streams are open.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.types import Receive, Scope, Send

from api.auth import AnyPrincipal, Principal, Reviewer
from api.responses import RunStatusOut, StreamEventOut
from api.runs import RunId, visible_run
from api.schemas import PG_INT_MAX
from api.stream_hub import Delivery, Subscriber, deliveries
from api.token_limits import LIMITED, give_back_stream_slot, take_stream_slot
from models.db import session_scope
from models.engine.previews import EventShown
from models.front import queries
from models.memory import memory_admin
from models.operations.event_feed import EventFeed, RunState
from models.settings import get_settings
from models.states import RUN_TERMINAL
from models.tables import utcnow

router = APIRouter(tags=["streams"])
After = Annotated[
    int | None,
    Query(ge=0, le=PG_INT_MAX, description="Send only events with ids above this."),
]
LastEventId = Annotated[
    str | None,
    Header(
        description="Resume after this: an event id, or a `reconnect` message's id (sent by "
        "`EventSource`)."
    ),
]
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "A server-sent event stream."},
    **LIMITED,
}


def start_feed(last_event_id: str | None, after: int | None) -> EventFeed | None:
    """Where a stream resumes: `Last-Event-ID` when it is an event id or a `reconnect` cursor
    (`EventFeed.resumed`), else `after`; None when neither is given."""
    if last_event_id is not None:
        resumed = EventFeed.resumed(last_event_id, utcnow())
        if resumed is not None:
            return resumed
    return None if after is None else EventFeed(after)


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


def status_event(state: RunState, kind: str) -> ServerSentEvent:
    out = RunStatusOut(run_id=state.run_id, status=state.status, plan_version=state.plan_version)
    return ServerSentEvent(out.model_dump_json(), event=kind)


def reconnect_event(feed: EventFeed) -> ServerSentEvent:
    """The last message of a stream whose lifetime is over: its `id` resumes it exactly."""
    return ServerSentEvent(json.dumps({"reason": "lifetime"}), event="reconnect", id=feed.cursor())


def timeline(
    sub: Subscriber, delivery: Delivery, principal: Principal, user_id: str
) -> list[ServerSentEvent]:
    """The `timeline` messages of a delivery's rows that the stream has not sent yet."""
    return [
        stream_event(event, principal, user_id) for event in sub.feed.take(delivery.rows, utcnow())
    ]


async def run_messages(sub: Subscriber, principal: Principal) -> AsyncIterator[ServerSentEvent]:
    """The messages of a run's stream until the run is final (or gone, or the stream's token
    revoked), or a `reconnect` at its lifetime."""
    status, state = "", None
    async for delivery in deliveries(sub, get_settings().stream_lifetime_s):
        if delivery is None:
            yield reconnect_event(sub.feed)
            return
        state = delivery.state or state  # (the hub's `sub.state` may be ahead of this delivery)
        if state is None:  # a run's stream has its state from its first delivery on
            return
        if state.status != status:
            status = state.status
            yield status_event(state, "status")
        for message in timeline(sub, delivery, principal, state.user_id):
            yield message
        if state.status in RUN_TERMINAL:
            yield status_event(state, "end")
            return


async def review_messages(sub: Subscriber, principal: Principal) -> AsyncIterator[ServerSentEvent]:
    """The messages of the review stream: every `escalation.*` event after its cursor, until
    its token is revoked, or a `reconnect` at its lifetime."""
    async for delivery in deliveries(sub, get_settings().stream_lifetime_s):
        if delivery is None:
            yield reconnect_event(sub.feed)
            return
        for message in timeline(sub, delivery, principal, ""):  # escalations quote no memory
            yield message


def newest_review_event() -> int:
    """The newest `escalation.*` event id: where the review stream starts by default."""
    with session_scope() as session:
        return queries.last_event_id(session, kind_prefix="escalation.")


class HeldStream(EventSourceResponse):
    """An event stream holding one of its token's stream slots until its response ends,
    however it ends (the client went away, the server shut down, the body never started)."""

    def __init__(self, messages: AsyncIterator[ServerSentEvent], release: Callable[[], None]):
        super().__init__(messages, ping=int(max(1, get_settings().stream_keepalive_s)))
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()


def responding(
    principal: Principal,
    messages: Callable[[], AsyncIterator[ServerSentEvent]],
) -> EventSourceResponse:
    """The stream's response, with keep-alive comments, once its token has a slot left
    (`TokenLimitExceeded`, 429, otherwise)."""
    take_stream_slot(principal)
    return HeldStream(messages(), lambda: give_back_stream_slot(principal))


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
    messages). 404 as for `GET /runs/{run_id}`; 429 when the token holds
    `AGENTQ_STREAM_MAX_PER_TOKEN` streams already."""
    with session_scope() as session:
        visible_run(session, run_id, principal)
    feed = start_feed(last_event_id, after) or EventFeed(0)
    sub = Subscriber(feed, principal.token_id, run_id=run_id)
    return responding(principal, lambda: run_messages(sub, principal))


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
    events, from the newest on unless resumed. Reviewer or admin; 429 as for a run's stream."""
    feed = start_feed(last_event_id, after) or EventFeed(newest_review_event())
    sub = Subscriber(feed, principal.token_id)
    return responding(principal, lambda: review_messages(sub, principal))
