"""A broker that accepts connections but never answers (a paused or overloaded Redis) must not
hang whoever sends a message: the send fails with `BrokerUnavailable` within its timeouts."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from models.engine import queue
from models.errors import BrokerUnavailable
from models.settings import Settings


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A TCP server on 127.0.0.1 that accepts every connection and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield f"redis://127.0.0.1:{server.getsockname()[1]}/0"
    server.close()
    for conn in accepted:
        conn.close()


def test_a_silent_broker_fails_the_send_within_its_timeouts(
    silent_broker: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the URL an engine started earlier in this process left behind would win over the settings
    monkeypatch.delenv("AGENTQ_BROKER_URL", raising=False)
    pid = os.getpid()
    saved = queue._client.get(pid)
    queue._client[pid] = queue.make_celery("silent", Settings(broker_url=silent_broker))
    started = time.monotonic()
    try:
        with pytest.raises(BrokerUnavailable, match=r"could not send agentq\.coordinate"):
            queue.send(queue.TASK_COORDINATE, 1)
        assert queue.try_send(queue.TASK_COORDINATE, 1) is False  # said, not raised
    finally:
        queue._client.pop(pid)
        if saved is not None:
            queue._client[pid] = saved
    attempts = 1 + int(queue.SEND_RETRY_POLICY["max_retries"])
    # both sends fail within their attempts' socket timeouts (doubled: the machine may be busy),
    # where without the timeouts they would wait forever
    assert time.monotonic() - started < 2 * 2 * attempts * (queue.BROKER_SOCKET_TIMEOUT_S + 1)
