"""Issue 27, items 3 and 4, over real HTTP: a revoked token's open stream is closed within the
re-check interval, a stream ends at its lifetime and the client resumes it missing nothing (a
row committing late included), a token's streams are capped, and costly reads are limited;
both limits answer 429 with `Retry-After` and the API's error body.

These need short intervals and small limits, so this module starts an API process of its own
(uvicorn on a free port, against the session's engine) with the settings of `LIMITS`; the
session's API keeps TEST_ENV's.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator

import httpx
import pytest
import sqlalchemy as sa
from httpx_sse import ServerSentEvent, connect_sse
from sqlmodel import Session, col

from agentq.client import Client
from api.responses import StreamEventOut
from models.access import api_tokens
from models.db import session_scope
from models.engine.events import record_event
from models.operations.event_feed import EventFeed
from models.tables import RunEvent, utcnow
from ops.deployment import API_APP_FACTORY
from ops.local import engine_env
from ops.stack import LocalStack
from tests.api.conftest import MakeToken
from tests.support.net import free_port, wait_until_up

pytestmark = pytest.mark.integration
RECHECK_S, LIFETIME_S, MAX_STREAMS, COSTLY_PER_MINUTE = 1.0, 8.0, 3, 5
LIMITS = {
    "AGENTQ_STREAM_RECHECK_S": str(RECHECK_S),
    "AGENTQ_STREAM_LIFETIME_S": str(LIFETIME_S),
    "AGENTQ_STREAM_MAX_PER_TOKEN": str(MAX_STREAMS),
    "AGENTQ_COSTLY_READS_PER_MINUTE": str(COSTLY_PER_MINUTE),
}
MARGIN_S = 4.0  # a poll, a thread hop and a loaded 2-core machine, on top of an interval
Escalated = Callable[..., tuple[int, int]]


@pytest.fixture(scope="module")
def limited_url(engine: LocalStack) -> Iterator[str]:
    port = free_port()
    env = engine_env(os.environ["AGENTQ_DATABASE_URL"], os.environ["AGENTQ_BROKER_URL"], LIMITS)
    argv = engine.uvicorn_argv(API_APP_FACTORY, host="127.0.0.1", port=port)
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_up(url, proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture
def http(limited_url: str) -> Iterator[Callable[[str], httpx.Client]]:
    """`http(raw_token)`: a client of the limited API sending that token."""
    opened: list[httpx.Client] = []

    def make(raw: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {raw}"}
        opened.append(httpx.Client(base_url=limited_url, headers=headers, timeout=60))
        return opened[-1]

    yield make
    for client in opened:
        client.close()


class Follower:
    """A stream followed in a thread: every message, and whether (and when) the server closed
    it."""

    def __init__(self, http: httpx.Client, path: str) -> None:
        self.messages: list[ServerSentEvent] = []
        self.status = 0
        self.closed_at: float | None = None
        self._opened = threading.Event()
        threading.Thread(target=self._follow, args=(http, path), daemon=True).start()
        assert self._opened.wait(30), "the stream did not answer"

    def _follow(self, http: httpx.Client, path: str) -> None:
        try:
            with connect_sse(http, "GET", path, timeout=httpx.Timeout(30, read=120)) as source:
                self.status = source.response.status_code
                self._opened.set()
                self.messages.extend(source.iter_sse())
        except httpx.TransportError:  # the test is over: its client was closed under it
            return
        self.closed_at = time.monotonic()

    def kinds(self) -> list[str]:
        return [json.loads(m.data)["kind"] for m in self.messages if m.event == "timeline"]

    def wait(self, found: Callable[[], bool], within_s: float) -> bool:
        deadline = time.monotonic() + within_s
        while not found() and time.monotonic() < deadline:
            time.sleep(0.05)
        return found()


def noted(session: Session, run_id: int, kind: str) -> int:
    """Write one event row of `kind` in `session`'s transaction; its id."""
    record_event(session, run_id, kind, note="from the test")
    newest = sa.select(sa.func.max(col(RunEvent.id))).where(
        col(RunEvent.run_id) == run_id, col(RunEvent.kind) == kind
    )
    return int(session.scalar(newest) or 0)


def opening(http: httpx.Client, path: str) -> httpx.Response:
    """The answer to opening the stream `path`, read whole unless it is a stream (200)."""
    with http.stream("GET", path) as response:
        if response.status_code != 200:
            response.read()
        return response


def note(run_id: int, kind: str) -> int:
    """Commit one event row of `kind`; its id."""
    with session_scope() as session:
        return noted(session, run_id, kind)


def test_a_revoked_tokens_open_review_stream_is_closed_within_the_recheck_interval(
    http: Callable[[str], httpx.Client], make_token: MakeToken, escalated: Escalated
) -> None:
    run_id, _ = escalated()
    raw = make_token("reviewer")
    reviewer = http(raw)
    token_id = reviewer.get("/api/v1/me").json()["token_id"]
    stream = Follower(reviewer, "/api/v1/reviews/stream")
    assert stream.status == 200
    note(run_id, "escalation.before_revoke")
    assert stream.wait(lambda: "escalation.before_revoke" in stream.kinds(), 10)
    with session_scope() as session:
        api_tokens.revoke_token(session, token_id)
    revoked = time.monotonic()
    assert stream.wait(lambda: stream.closed_at is not None, RECHECK_S + MARGIN_S), (
        "the revoked token's stream stayed open"
    )
    assert stream.closed_at is not None and stream.closed_at - revoked <= RECHECK_S + MARGIN_S
    assert "reconnect" not in [m.event for m in stream.messages]  # not its lifetime: revoked
    assert opening(reviewer, "/api/v1/reviews/stream").status_code == 401


class CountingTransport(httpx.HTTPTransport):
    """An httpx transport that counts the requests sent through it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        return super().handle_request(request)


def test_a_stream_ends_at_its_lifetime_and_the_resumed_client_misses_no_event(
    limited_url: str, make_token: MakeToken, escalated: Escalated
) -> None:
    run_id, _ = escalated()
    transport = CountingTransport()
    got: list[StreamEventOut] = []

    def follow() -> None:
        with Client(limited_url, make_token("admin"), transport=transport) as agentq:
            for item in agentq.events(run_id):
                if isinstance(item, StreamEventOut):
                    got.append(item)
                    if item.kind == "test.after_resume":
                        return

    threading.Thread(target=follow, daemon=True).start()
    opened = time.monotonic()
    written = [note(run_id, "test.before")]
    time.sleep(max(0.0, opened + LIFETIME_S - 2 - time.monotonic()))
    with session_scope() as late:  # its id is taken now; it commits after the stream resumed
        late_id = noted(late, run_id, "test.late")
        written.append(note(run_id, "test.newer"))  # a higher id, sent before the lifetime ends
        deadline = time.monotonic() + LIFETIME_S + MARGIN_S
        while transport.sent < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert transport.sent >= 2, "the stream did not end at its lifetime, or was not resumed"
    written += [late_id, note(run_id, "test.after_resume")]
    deadline = time.monotonic() + 10
    while "test.after_resume" not in [e.kind for e in got] and time.monotonic() < deadline:
        time.sleep(0.05)
    ids = [e.id for e in got]
    assert set(written) <= set(ids), f"missed {sorted(set(written) - set(ids))}"
    assert len(ids) == len(set(ids)), "an event was sent twice"


def test_the_server_says_reconnect_with_an_id_before_ending_a_stream_at_its_lifetime(
    http: Callable[[str], httpx.Client], make_token: MakeToken, escalated: Escalated
) -> None:
    run_id, _ = escalated()
    stream = Follower(http(make_token("admin")), f"/api/v1/runs/{run_id}/events/stream")
    opened = time.monotonic()
    assert stream.wait(lambda: stream.closed_at is not None, LIFETIME_S + MARGIN_S)
    assert stream.closed_at is not None and stream.closed_at - opened >= LIFETIME_S - 1
    last = stream.messages[-1]
    assert last.event == "reconnect" and json.loads(last.data) == {"reason": "lifetime"}
    newest = max(int(m.id) for m in stream.messages if m.event == "timeline")
    cursor = EventFeed.resumed(last.id, utcnow())  # where the stream stood: the newest sent
    assert cursor is not None and cursor.newest == newest


def test_the_n_plus_first_stream_of_a_token_gets_429_with_retry_after(
    http: Callable[[str], httpx.Client], make_token: MakeToken, escalated: Escalated
) -> None:
    run_id, _ = escalated()
    path = f"/api/v1/runs/{run_id}/events/stream"
    watcher = http(make_token("admin"))
    held = [Follower(watcher, path) for _ in range(MAX_STREAMS)]
    assert [f.status for f in held] == [200] * MAX_STREAMS
    refused = opening(watcher, path)
    assert refused.status_code == 429, "a token opened more streams than its cap"
    assert refused.json()["error"] == "TokenLimitExceeded"
    assert refused.json()["detail"].startswith("AGENTQ_STREAM_MAX_PER_TOKEN:")
    assert int(refused.headers["Retry-After"]) >= 1
    assert Follower(http(make_token("admin")), path).status == 200  # another token's count
    review = opening(watcher, "/api/v1/reviews/stream")  # every stream of the token counts
    assert review.status_code == 429


def test_costly_reads_over_the_limit_get_429_with_retry_after(
    http: Callable[[str], httpx.Client], make_token: MakeToken
) -> None:
    reader = http(make_token("submitter", user="costly-reader"))
    facts = [reader.get("/api/v1/memory/facts") for _ in range(COSTLY_PER_MINUTE)]  # unpaged
    assert [a.status_code for a in facts] == [200] * COSTLY_PER_MINUTE
    refused = reader.get("/api/v1/memory/search", params={"q": "which currency?"})
    assert refused.status_code == 429, refused.text
    assert refused.json()["error"] == "TokenLimitExceeded"
    assert refused.json()["detail"].startswith("AGENTQ_COSTLY_READS_PER_MINUTE:")
    assert 1 <= int(refused.headers["Retry-After"]) <= 60 / COSTLY_PER_MINUTE
    assert reader.get("/api/v1/runs", params={"limit": 50}).status_code == 200  # a default page
    assert reader.get("/api/v1/runs", params={"limit": 500}).status_code == 429  # a large one
    other = http(make_token("submitter", user="costly-reader"))
    assert other.get("/api/v1/memory/facts").status_code == 200  # counted per token


def test_the_spec_documents_the_429s(limited_url: str) -> None:
    spec = httpx.get(f"{limited_url}/openapi.json", trust_env=False).json()
    for path in (
        "/api/v1/runs/{run_id}/events/stream",
        "/api/v1/reviews/stream",
        "/api/v1/memory/search",
        "/api/v1/memory/facts",
        "/api/v1/runs",
        "/api/v1/runs/{run_id}",
        "/api/v1/reviews",
    ):
        refusal = spec["paths"][path]["get"]["responses"]["429"]
        assert "Retry-After" in refusal["headers"], path
        assert refusal["content"]["application/json"]["schema"]["$ref"].endswith("/ErrorOut")
