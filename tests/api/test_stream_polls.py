"""Issue 27, item 4: many open streams do not multiply the API's database statements. Each
stream used to poll the database itself (two statements every 0.2 s), so 200 streams on one run
took the API to 83% CPU; now one poller per process feeds them all (`api.stream_hub`).

In process: uvicorn serves `api.app.create_app` from a thread of this process, over a real
socket, so every statement the API sends goes through this process's engine
(`models.db.get_engine`), where `after_cursor_execute` counts them. Counted while the streams
are open and quiet (their run waits for review), with one stream and then with `MANY`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import uvicorn
from httpx_sse import connect_sse
from sqlalchemy import event

from api.app import create_app
from models.db import get_engine
from ops.stack import LocalStack
from tests.api.conftest import MakeToken
from tests.support.net import free_port

pytestmark = pytest.mark.integration
MANY = 30  # under AGENTQ_STREAM_MAX_PER_TOKEN's default (32): one token opens them all
WINDOW_S = 3.0  # 15 polls at the default AGENTQ_STREAM_POLL_INTERVAL_S (0.2 s)
SETTLE_S = 1.5  # after the streams opened: their first reads are done


@pytest.fixture
def in_process_url(engine: LocalStack) -> Iterator[str]:
    """The API served by uvicorn from a thread of this process; its URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(), host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=30)


class Statements:
    """Counts the statements this process's engine sends while `counting`."""

    def __init__(self) -> None:
        self.sent = 0
        self.counting = False
        event.listen(get_engine(), "after_cursor_execute", self._count)

    def _count(self, *_args: Any) -> None:
        if self.counting:
            self.sent += 1

    def over(self, seconds: float) -> int:
        """The statements sent in the next `seconds`."""
        self.sent, self.counting = 0, True
        time.sleep(seconds)
        self.counting = False
        return self.sent

    def close(self) -> None:
        event.remove(get_engine(), "after_cursor_execute", self._count)


def open_streams(http: httpx.Client, path: str, count: int) -> None:
    """Open `count` streams of `path`, each followed in a thread; returns once each has sent its
    first message."""
    answered = threading.Semaphore(0)

    def follow() -> None:
        try:
            with connect_sse(http, "GET", path, timeout=httpx.Timeout(30, read=None)) as source:
                assert source.response.status_code == 200
                for _ in source.iter_sse():
                    answered.release()
        except httpx.TransportError:  # the test is over: its client was closed under it
            return

    for _ in range(count):
        threading.Thread(target=follow, daemon=True).start()
    for _ in range(count):
        assert answered.acquire(timeout=30), "a stream sent nothing"


def test_many_open_streams_send_no_more_statements_than_one(
    in_process_url: str, make_token: MakeToken, escalated: Callable[..., tuple[int, int]]
) -> None:
    run_id, _ = escalated()  # waiting for review: its streams stay open, quiet
    path = f"/api/v1/runs/{run_id}/events/stream"
    limits = httpx.Limits(max_connections=MANY + 5)
    headers = {"Authorization": f"Bearer {make_token('admin')}"}
    statements = Statements()
    with httpx.Client(base_url=in_process_url, headers=headers, limits=limits) as http:
        try:
            open_streams(http, path, 1)
            time.sleep(SETTLE_S)
            one = statements.over(WINDOW_S)
            open_streams(http, path, MANY - 1)
            time.sleep(SETTLE_S)
            many = statements.over(WINDOW_S)
        finally:
            statements.close()
    assert one > 0, "the stream's poll sent no statement"
    assert many <= 2 * one, f"{MANY} streams sent {many} statements in {WINDOW_S} s; one, {one}"
