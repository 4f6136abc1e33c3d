"""The brokers of the engine test matrix: the embedded Redis, RabbitMQ, an external Redis.

`AGENTQ_TEST_AMQP_URL` and `AGENTQ_TEST_REDIS_URL` name servers this test run may empty (`.ci/run`
sets them where such servers answer). Unset, their variants are reported as skipped, naming the
variable; set, a server that does not answer fails the tests that use it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import pytest
from kombu import Connection
from kombu.exceptions import ChannelError
from kombu.utils.url import maybe_sanitize_url

from models.engine.queue import QUEUE_COORDINATOR, QUEUE_WEBHOOKS, WORKER_QUEUES
from ops.stack import LocalStack
from tests.integration.conftest import TEST_ENV, other_engine

BROKER_VARIABLES: Final = {"amqp": "AGENTQ_TEST_AMQP_URL", "redis": "AGENTQ_TEST_REDIS_URL"}
CONNECT_TIMEOUT_S: Final = 5.0


def broker_params() -> list[Any]:
    """pytest params: None (the embedded Redis), then each external broker's URL."""
    params: list[Any] = [pytest.param(None, id="embedded")]
    for name, variable in BROKER_VARIABLES.items():
        url = os.environ.get(variable)
        marks = () if url else (pytest.mark.skip(reason=f"{variable} is not set"),)
        params.append(pytest.param(url, id=name, marks=marks))
    return params


def empty_broker(url: str) -> str:
    """Connect to the broker at `url` and drop what an earlier run left there (FLUSHDB for
    Redis, a purge of agentq's queues for RabbitMQ); its transport (`redis`, `amqp`). Fails the
    test, naming the URL without its password, if it does not answer."""
    with Connection(url, connect_timeout=CONNECT_TIMEOUT_S) as connection:
        try:
            connection.ensure_connection(max_retries=1)
        except Exception as exc:
            pytest.fail(f"broker {maybe_sanitize_url(url)} does not answer: {exc}")
        driver = str(connection.transport.driver_type)
        if driver == "redis":
            connection.default_channel.client.flushdb()
        else:
            for name in (*WORKER_QUEUES, QUEUE_COORDINATOR, QUEUE_WEBHOOKS):
                _purge(connection, name)
    return driver


def _purge(connection: Connection, queue: str) -> None:
    with connection.channel() as channel, contextlib.suppress(ChannelError):
        channel.queue_purge(queue)  # a queue never declared raises: nothing to drop


@contextmanager
def engine_on(url: str | None) -> Iterator[LocalStack | None]:
    """Nothing for None (the session engine serves); else an engine of its own on the broker at
    `url`, emptied first, that this process talks to inside the block."""
    if url is None:
        yield None
        return
    empty_broker(url)
    with other_engine(TEST_ENV, worker_concurrency=2, broker_url=url) as stack:
        yield stack
