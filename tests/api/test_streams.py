"""The server-sent event streams over real HTTP: an event row reaches a listening client within
a second of its commit, `Last-Event-ID` resumes, and the streams keep the reads' rules."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from models.db import session_scope
from models.engine.events import record_event
from tests.api.conftest import Client

pytestmark = pytest.mark.integration
LATENCY_MAX_S = 1.0  # issue 15: "SSE delivers an event within a second of the row being written"


Got = list[tuple[float, ServerSentEvent]]  # (arrival time, message)


def listen(
    http: httpx.Client, path: str, found: Callable[[ServerSentEvent], bool], **headers: str
) -> Got:
    """Follow the stream in a thread until `found` says yes; what arrived, as it arrives."""
    opened, got = threading.Event(), []  # type: ignore[var-annotated]

    def follow() -> None:
        with connect_sse(http, "GET", path, headers=headers, timeout=30) as source:
            assert source.response.status_code == 200
            opened.set()
            for sse in source.iter_sse():
                got.append((time.monotonic(), sse))
                if found(sse):
                    return

    threading.Thread(target=follow, daemon=True).start()
    assert opened.wait(10), "the stream did not open"
    return got


def wait_for(got: Got, kind: str, run_id: int | None = None) -> tuple[float, ServerSentEvent]:
    """The first `timeline` message of `kind` (of run `run_id`) to arrive, within 10 s."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for arrived, sse in list(got):
            event = json.loads(sse.data) if sse.event == "timeline" else {}
            if event.get("kind") == kind and run_id in (None, event["run_id"]):
                return arrived, sse
        time.sleep(0.01)
    raise AssertionError(f"no {kind} event in {[s.event for _, s in got]}")


def write_event(run_id: int, kind: str) -> float:
    """Commit one event row; the time of the commit."""
    with session_scope() as session:
        record_event(session, run_id, kind, note="from the test")
    return time.monotonic()


def kind_is(kind: str) -> Callable[[ServerSentEvent], bool]:
    return lambda sse: sse.event == "timeline" and json.loads(sse.data)["kind"] == kind


def test_a_run_stream_delivers_a_new_event_within_a_second(
    client: Client, escalated: Callable[..., tuple[int, int]]
) -> None:
    run_id, _ = escalated()  # waiting for review: its stream stays open
    got = listen(client("admin"), f"/api/v1/runs/{run_id}/events/stream", kind_is("test.note"))
    wait_for(got, "escalation.opened")  # the history first
    committed = write_event(run_id, "test.note")
    arrived, sse = wait_for(got, "test.note")
    assert arrived - committed < LATENCY_MAX_S
    assert json.loads(sse.data)["detail"] == {"note": "from the test"} and sse.id.isdigit()
    assert got[0][1].event == "status"
    assert json.loads(got[0][1].data)["status"] == "waiting_review"


def test_last_event_id_resumes_a_run_stream_after_that_event(
    client: Client, escalated: Callable[..., tuple[int, int]]
) -> None:
    run_id, _ = escalated()
    path = f"/api/v1/runs/{run_id}/events/stream"
    first = listen(client("admin"), path, kind_is("escalation.opened"))
    _, raised = wait_for(first, "escalation.opened")
    ids = [int(s.id) for _, s in first if s.event == "timeline"]
    resume = {"Last-Event-ID": str(ids[-2])}
    resumed = listen(client("admin"), path, kind_is("test.resumed"), **resume)
    write_event(run_id, "test.resumed")
    wait_for(resumed, "test.resumed")
    again = [int(s.id) for _, s in resumed if s.event == "timeline"]
    assert again[:1] == [int(raised.id)] and again[1] > int(raised.id)


def test_the_review_stream_delivers_escalation_events_to_reviewers_only(
    client: Client, escalated: Callable[..., tuple[int, int]]
) -> None:
    assert client("alice").get("/api/v1/reviews/stream").status_code == 403
    got = listen(client("reviewer"), "/api/v1/reviews/stream", kind_is("escalation.test"))
    run_id, _ = escalated()  # raised after the stream opened: it starts from the newest event
    _, raised = wait_for(got, "escalation.opened", run_id)
    assert raised.id.isdigit()
    committed = write_event(run_id, "escalation.test")
    arrived, _ = wait_for(got, "escalation.test", run_id)
    assert arrived - committed < LATENCY_MAX_S
