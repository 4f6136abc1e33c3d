"""Where a followed event stream stands across reconnects (`agentq.client`'s `events`,
`review_events` and `wait`): the last event id to resume from with `Last-Event-ID`, the
failures in a row, and what a close by the server means."""

from __future__ import annotations

import time
from typing import Final

import httpx
from httpx_sse import ServerSentEvent

from agentq import routes
from agentq.routes import FINAL_STATUSES, StreamItem
from api.responses import RunStatusOut

TIMEOUT_S: Final = 30.0  # one request, connect to answer
STREAM_READ_TIMEOUT_S: Final = 60.0  # silence on a stream: 4 missed keep-alives (every 15 s)
STREAM_RETRIES: Final = 3  # reconnects in a row before a dropped stream's error is raised


def settled(item: StreamItem, or_review: bool) -> bool:
    if not isinstance(item, RunStatusOut):
        return False
    return item.status in FINAL_STATUSES or (or_review and item.status == "waiting_review")


class StreamState:
    """Where a stream stands across reconnects: the last event id and the failures in a row."""

    def __init__(self, after: int | None, deadline: float | None) -> None:
        self.last_id = None if after is None else str(after)
        self.deadline, self.failures = deadline, 0

    def timeout(self, read_s: float) -> httpx.Timeout:
        """The connection's timeout: reads wait at most until the deadline."""
        if self.deadline is not None:
            read_s = max(0.0, min(read_s, self.deadline - time.monotonic()))
        return httpx.Timeout(TIMEOUT_S, read=read_s)

    def seen(self, sse: ServerSentEvent) -> StreamItem | None:
        self.failures = 0
        self.last_id = sse.id or self.last_id
        return routes.stream_item(sse.event, sse.data)

    def failed(self, exc: httpx.TransportError) -> float:
        """Seconds to wait before reconnecting; raises `TimeoutError` past the deadline, and
        `exc` after `STREAM_RETRIES` failures in a row."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError("the stream's deadline passed") from exc
        self.failures += 1
        if self.failures > STREAM_RETRIES:
            raise exc
        return 0.2 * (1 << self.failures)

    def ended(self, last: str) -> float | None:
        """After the server closed the stream, its last message's event being `last`: None when
        the stream is over (`end`), else seconds to wait before resuming: 0 after `reconnect`
        (its lifetime ended), a back-off after a close with neither (its token was revoked or
        its run purged, which the next request says with an `ApiError`; or a restart)."""
        if last == "end":
            return None
        if last == "reconnect":
            return 0.0
        return self.failed(httpx.RemoteProtocolError("the server closed the stream"))
