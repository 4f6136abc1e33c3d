"""Publish every Celery task message twice (the `duplicates` scenario's fault).

`publish_twice()` wraps kombu's `Producer.publish`, through which Celery sends every task
(`celery.app.amqp`); `TWICE_DIR` holds the `sitecustomize.py` that calls it in each engine
process, and the scenario calls it in its own process too (a submit sends the first steps).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kombu import messaging

TWICE_DIR = Path(__file__).with_name("twice")


def publish_twice() -> Callable[[], None]:
    """From now on this process publishes each task message (one with a `task` header) twice;
    returns the function that restores the single publish."""
    original: Callable[..., Any] = messaging.Producer.publish

    def publish(self: messaging.Producer, body: Any, *args: Any, **kwargs: Any) -> Any:
        if "task" in (kwargs.get("headers") or {}):
            original(self, body, *args, **kwargs)
        return original(self, body, *args, **kwargs)

    messaging.Producer.publish = publish  # type: ignore[method-assign]

    def restore() -> None:
        messaging.Producer.publish = original  # type: ignore[method-assign]

    return restore
