"""models/queue.py: the Celery app every process builds connects to agentq's broker alone."""

from __future__ import annotations

import pytest

from models import queue
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
