"""A console stream (`api.ui.live`) ends once its session does: signed out while the review
stream is open, the next event is not sent and the stream closes. In process (FastAPI's
TestClient on the real database), with the session checked every poll."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from models.access import api_tokens
from models.db import session_scope
from models.engine.events import record_event
from models.settings import get_settings
from ops.stack import LocalStack
from tests.support.console import csrf_of

pytestmark = pytest.mark.integration
ENDED_WITHIN_S = 10.0


def _signed_in(role: str) -> TestClient:
    with session_scope() as session:
        name = f"streams-{uuid.uuid4().hex[:8]}"
        _, raw = api_tokens.create_token(session, name=name, role=role)
    client = TestClient(create_app())
    form = client.get("/ui/login")
    signed = client.post(
        "/ui/login", data={"token": raw, "csrf_token": csrf_of(form.text)}, follow_redirects=False
    )
    assert signed.status_code == 303, signed.text
    return client


def test_signing_out_ends_an_open_review_stream(
    engine: LocalStack, make_run: Callable[..., int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTQ_STREAM_RECHECK_S", "0.01")
    get_settings.cache_clear()
    run_id = make_run([{"name": "only", "kind": "tool", "tool": "noop"}], start=False)
    watcher = _signed_in("reviewer")
    received: list[str] = []
    opened = threading.Event()

    def follow() -> None:
        with watcher.stream("GET", "/ui/reviews/stream") as response:
            opened.set()
            received.extend(response.iter_lines())

    streaming = threading.Thread(target=follow, daemon=True)
    streaming.start()
    opened.wait(timeout=ENDED_WITHIN_S)
    with TestClient(create_app(), cookies=dict(watcher.cookies)) as same_session:
        csrf = csrf_of(same_session.get("/ui/reviews").text)
        assert same_session.post("/ui/logout", data={"csrf_token": csrf}).status_code == 200
    with session_scope() as session:
        record_event(session, run_id, "escalation.noted", note="after sign-out")
    streaming.join(timeout=ENDED_WITHIN_S)
    assert not streaming.is_alive(), "the stream outlived its session"
    assert not any("after sign-out" in line for line in received), received
    watcher.close()
