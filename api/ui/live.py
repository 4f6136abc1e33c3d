"""The console's live streams: the API's server-sent event streams behind the session cookie.

`GET /ui/runs/{run_id}/events/stream` and `GET /ui/reviews/stream` send the same messages as
`/api/v1/runs/{run_id}/events/stream` and `/api/v1/reviews/stream` (`api.streams`, fed by the
same poller, `api.stream_hub`), for a signed-in console user: the browser's `EventSource`
sends the session cookie, so no API token ever reaches the page's JavaScript. Visibility is
the API's: another user's run is "not found" for a submitter, the review stream is for
reviewers and admins. `static/console.js` opens them and, on each message, fetches the page
again and swaps its live region in place (no navigation).

A stream is not a person's activity (it does not keep an idle session alive). Its session is
checked again every `AGENTQ_STREAM_RECHECK_S`, whether events flow or not: signing out, revoking
the token or letting the session expire ends an open stream within that time. It counts against
its token's `AGENTQ_STREAM_MAX_PER_TOKEN` and ends at `AGENTQ_STREAM_LIFETIME_S` with a
`reconnect` message, after which `EventSource` resumes it by itself.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from sse_starlette import EventSourceResponse

from api.runs import RunId, visible_run
from api.stream_hub import Subscriber
from api.streams import (
    SSE_RESPONSE,
    After,
    LastEventId,
    newest_review_event,
    responding,
    review_messages,
    run_messages,
    start_feed,
)
from api.ui.security import current_principal, reviewer, signed_in
from models.db import session_scope
from models.operations.event_feed import EventFeed

router = APIRouter()


def session_id(request: Request) -> int:
    """The row id of the request's live session (`current_principal` found it already)."""
    found = signed_in(request)
    assert found is not None
    return found.session_id


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
    feed = start_feed(last_event_id, after) or EventFeed(0)
    sub = Subscriber(feed, principal.token_id, run_id=run_id, session_id=session_id(request))
    return responding(principal, lambda: run_messages(sub, principal))


@router.get("/reviews/stream", response_class=EventSourceResponse, responses=SSE_RESPONSE)
def review_stream(
    request: Request, after: After = None, last_event_id: LastEventId = None
) -> EventSourceResponse:
    """Every `escalation.*` event, live, as `GET /api/v1/reviews/stream` sends it, from the
    newest on unless resumed. Reviewers and admins; a submitter gets 403."""
    principal = reviewer(request)
    feed = start_feed(last_event_id, after) or EventFeed(newest_review_event())
    sub = Subscriber(feed, principal.token_id, session_id=session_id(request))
    return responding(principal, lambda: review_messages(sub, principal))
