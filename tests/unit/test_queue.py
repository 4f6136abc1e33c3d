"""models/engine/queue.py: the Celery app every process builds connects to agentq's broker alone."""

from __future__ import annotations

import os

import pytest

from models.engine import queue
from models.errors import BrokerUnavailable
from models.settings import Settings


def test_celery_broker_url_in_the_environment_does_not_move_the_broker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 11: Celery reads `CELERY_BROKER_URL` over an app's `broker_url` (and `celery -b` /
    `BROKER_URL` set it), so a process could consume or send elsewhere than agentq said."""
    monkeypatch.delenv("AGENTQ_BROKER_URL", raising=False)
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://elsewhere:6379/0")
    app = queue.make_celery("t", Settings(_env_file=None, broker_url="redis://chosen:6380/0"))
    for connection in (app.connection_for_read(), app.connection_for_write(), app.connection()):
        assert (connection.hostname, connection.port) == ("chosen", 6380)


@pytest.mark.parametrize(
    ("countdown", "held"), [(None, False), (0.0, False), (1799.0, False), (1801.0, True)]
)
def test_a_countdown_over_half_the_visibility_timeout_waits_in_postgres(
    countdown: float | None, held: bool
) -> None:
    """Issue 11, item 2: Redis redelivers a countdown message longer than its visibility timeout
    early (kombu#337), so such a delay is never parked in the broker."""
    settings = Settings(_env_file=None, visibility_timeout_s=3600)
    assert queue.held_back(countdown, settings) is held


def test_a_held_back_message_is_not_published(monkeypatch: pytest.MonkeyPatch) -> None:
    """It never reaches the broker: here one that refuses every connection, which a message
    sent at once does reach (and fails on)."""
    monkeypatch.delenv("AGENTQ_BROKER_URL", raising=False)
    settings = Settings(_env_file=None, visibility_timeout_s=600)
    monkeypatch.setattr(queue, "get_settings", lambda: settings)
    pid = os.getpid()
    saved = queue._client.get(pid)
    queue._client[pid] = queue.make_celery(
        "refused", Settings(_env_file=None, broker_url="redis://127.0.0.1:1/0")
    )
    try:
        queue.send(queue.TASK_EXECUTE_STEP, 1, countdown=301)  # held back: no error
        with pytest.raises(BrokerUnavailable):
            queue.send(queue.TASK_EXECUTE_STEP, 1, countdown=299)
    finally:
        queue._client.pop(pid)
        if saved is not None:
            queue._client[pid] = saved


def test_sending_builds_no_result_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29's profile: Celery's `AsyncResult` made each new API thread build the app's result
    backend (a scan of every installed package's entry points) for a result never asked for.
    A message sent on kombu's in-memory broker leaves no backend in the sending thread."""
    pid = os.getpid()
    saved = queue._client.get(pid)
    # kombu's in-memory transport reaches no other process, so no setting may name it
    # (`models.settings_connections.BROKER_SCHEMES`): the test gives it past the check.
    memory = Settings(_env_file=None).model_copy(update={"broker_url": "memory://"})
    app = queue.make_celery("memory", memory)
    queue._client[pid] = app
    try:
        queue.send(queue.TASK_EXECUTE_STEP, 7)
        assert not hasattr(app._local, "backend")
        with app.connection_for_read() as connection:
            message = connection.SimpleQueue("steps").get(timeout=1)
        assert message.headers["task"] == queue.TASK_EXECUTE_STEP
        assert message.headers["argsrepr"] == "[7]"
    finally:
        queue._client.pop(pid)
        if saved is not None:
            queue._client[pid] = saved
