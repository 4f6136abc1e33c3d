"""The console's live streams: the API's server-sent event streams behind the session cookie.

`GET /ui/runs/{run_id}/events/stream` and `GET /ui/reviews/stream` send the same messages as
`/api/v1/runs/{run_id}/events/stream` and `/api/v1/reviews/stream` (`api.streams`, over the
same `models.event_feed` cursor), for a signed-in console user: the browser's `EventSource`
sends the session cookie, so no API token ever reaches the page's JavaScript. Visibility is
the API's: another user's run is "not found" for a submitter, the review stream is for
reviewers and admins. `static/console.js` opens them and, on each message, fetches the page
again and swaps its live region in place (no navigation).

A stream is not a person's activity (it does not keep an idle session alive), and the session
is checked again every `SESSION_RECHECK_S` while events flow: signing out, revoking the token
or letting the session expire ends an open stream at its next message.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Final

import anyio
from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from api.runs import RunId, visible_run
from api.streams import (
    SSE_RESPONSE,
    After,
    LastEventId,
    newest_review_event,
    responding,
    review_messages,
    run_messages,
    start_after,
)
from api.ui.security import current_principal, reviewer, session_alive
from models.db import session_scope

SESSION_RECHECK_S: Final = 30.0
"""How often (seconds, at most) an open stream looks its session up again: a signed-out
console stops receiving within this much time of its next event."""
router = APIRouter()


async def while_signed_in(
    request: Request, messages: AsyncIterator[ServerSentEvent]
) -> AsyncIterator[ServerSentEvent]:
    """`messages` until they end or the request's session has ended (checked before a message
    once `SESSION_RECHECK_S` passed since the last check)."""
    checked = time.monotonic()
    async for message in messages:
        if time.monotonic() - checked >= SESSION_RECHECK_S:
            if not await anyio.to_thread.run_sync(session_alive, request):
                return
            checked = time.monotonic()
        yield message


@router.get(
    "/runs/{run_id}/events/stream", response_class=EventSourceResponse, responses=SSE_RESPONSE
)
def run_stream(
    request: Request, run_id: RunId, after: After = None, last_event_id: LastEventId = None
) -> EventSourceResponse:
    """The run's timeline, live, as `GET /api/v1/runs/{run_id}/events/stream` sends it.
    Redirects to sign-in without a session; "not found" as the run page."""
    principal = current_principal(request)
    with session_scope() as session:
        visible_run(session, run_id, principal)
    start = start_after(last_event_id, after)
    return responding(lambda: while_signed_in(request, run_messages(run_id, principal, start)))


@router.get("/reviews/stream", response_class=EventSourceResponse, responses=SSE_RESPONSE)
def review_stream(
    request: Request, after: After = None, last_event_id: LastEventId = None
) -> EventSourceResponse:
    """Every `escalation.*` event, live, as `GET /api/v1/reviews/stream` sends it, from the
    newest on unless resumed. Reviewers and admins; a submitter gets 403."""
    principal = reviewer(request)
    start = start_after(last_event_id, after)
    first = newest_review_event() if start is None else start
    return responding(lambda: while_signed_in(request, review_messages(principal, first)))
